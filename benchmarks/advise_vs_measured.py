"""advise = what runs: advise's per-rank memory for every torch method beside the peak `compare` measures, on the
bundled llama, over precisions and activation checkpointing modes.

    python benchmarks/advise_vs_measured.py --out /tmp/avm                      # the whole grid (hours on 2 cores)
    python benchmarks/advise_vs_measured.py --precision bf16-mixed --checkpointing none --nproc 2 --out /tmp/avm
    python benchmarks/advise_vs_measured.py --precision bf16-true --out /tmp/avm-true \
        --methods ddp,fsdp,fsdp:shard=grad_op,fsdp:shard=none                  # bf16-true: the methods that run it
    python benchmarks/advise_vs_measured.py --table /tmp/avm                    # the table of runs already made
    python benchmarks/advise_vs_measured.py --table /tmp/avm --record tests/advise/measured_llama.json

Each (precision, checkpointing) pair is one `compare` (its cells are the methods × process counts), written to its
own folder under --out, so a grid can be run a piece at a time and tabulated at the end. The table is rank 0's:
advise's total (bench/budget.py's figure for the cell, by the model as it is now) against the measured peak
(``peak_mem_bytes[0]``; on a CPU the tensors' peak over profiled steps), and the state bytes, which must be equal.
It prints ratios and differences only; the suite holds a subset of the cases (tests/advise/, tests/strategies/).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

METHODS = ["ddp", "fsdp", "fsdp:shard=grad_op", "fsdp:shard=none", "deepspeed:zero1", "deepspeed:zero2",
           "deepspeed:zero3", "tp", "fsdp+tp", "pp"]
PRECISIONS = ["fp32", "bf16-mixed"]
MODES = ["none", "full", "op", "every:2"]
TOLERANCE = 0.10


def run_grid(out: Path, methods: list[str], nprocs: list[int], precisions: list[str], modes: list[str],
             width: int, depth: int, steps: int) -> None:
    from paratrain.bench.compare import CompareSettings, run_compare

    for precision in precisions:
        for mode in modes:
            folder = out / f"{precision}-{mode.replace(':', '')}"
            if (folder / "results.json").exists():
                print(f"{folder.name}: done before, kept", file=sys.stderr)
                continue
            settings = CompareSettings(workload="llama", strategies=methods, nproc=nprocs, steps=steps, warmup=2,
                                       width=width, depth=depth, precision=precision,
                                       activation_checkpointing=mode, timeout=900)
            print(f"{folder.name}: {len(methods) * len(nprocs)} cells", file=sys.stderr)
            results = run_compare(settings, folder)
            (folder / "results.json").write_text(json.dumps(results, indent=1, default=str))


def rows(out: Path) -> list[dict]:
    """One row per cell of every compare under ``out``, with advise's figure as the current model gives it (not the
    one stored with the run, so a change to the model is seen against the same measurements)."""
    from paratrain.bench import budget
    from paratrain.bench.compare import CompareSettings, _workload

    fields = CompareSettings.__dataclass_fields__
    found = []
    for results in sorted(out.glob("*/results.json")):
        data = json.loads(results.read_text())
        settings = CompareSettings(**{k: v for k, v in data["settings"].items() if k in fields})
        workload = _workload(settings)
        for cell in data["cells"]:
            mem = budget.predict(cell["strategy"], cell["nproc"], workload=workload, width=settings.width,
                                 depth=settings.depth, precision=settings.precision,
                                 checkpointing=settings.activation_checkpointing, weak=settings.scaling == "weak")
            row = {"precision": settings.precision or "fp32",
                   "checkpointing": settings.activation_checkpointing or "none", "cell": cell["key"],
                   "status": cell["status"], "predicted": mem.total if mem else None, "measured": None,
                   "state_ok": None, "state_diff": None}
            if cell["status"] == "ok" and cell.get("peak_mem_bytes") and mem is not None:
                row["measured"] = cell["peak_mem_bytes"][0]
                # DeepSpeed's engine keeps a few scalars beside its partitions (a gradient norm, a step count)
                row["state_diff"] = cell["state_bytes"][0] - mem.state if cell.get("state_bytes") else None
                slack = 64 if cell["strategy"].startswith("deepspeed") else 0
                row["state_ok"] = row["state_diff"] is not None and 0 <= row["state_diff"] <= slack
            found.append(row)
    return found


def record(out: Path) -> list[dict]:
    """What the suite keeps of the runs under ``out`` (tests/advise/measured_llama.json): each ok cell's settings,
    rank 0's measured peak and state bytes."""
    kept = []
    for results in sorted(out.glob("*/results.json")):
        data = json.loads(results.read_text())
        s = data["settings"]
        for cell in data["cells"]:
            if cell["status"] == "ok" and cell.get("peak_mem_bytes") and cell.get("state_bytes"):
                kept.append({"strategy": cell["strategy"], "nproc": cell["nproc"], "width": s["width"],
                             "depth": s["depth"], "precision": s.get("precision") or "fp32",
                             "checkpointing": s.get("activation_checkpointing") or "none",
                             "peak": cell["peak_mem_bytes"][0], "state": cell["state_bytes"][0],
                             "peak_kind": cell.get("peak_mem_kind")})
    return kept


def merged(path: Path, new: list[dict]) -> list[dict]:
    """The cells already recorded in ``path`` that ``new`` does not measure again, then ``new``: a grid recorded a
    piece at a time (the 4-process half, one precision) adds to the file instead of replacing it."""
    def key(cell: dict) -> tuple:
        return cell["strategy"], cell["nproc"], cell["width"], cell["depth"], cell["precision"], cell["checkpointing"]

    again = {key(cell) for cell in new}
    old = json.loads(path.read_text()) if path.exists() else []
    return [cell for cell in old if key(cell) not in again] + new


def _state_words(row: dict) -> str:
    diff = row.get("state_diff")
    if diff is None:
        return "—"
    if diff == 0:
        return "exact"
    return f"{'yes' if row['state_ok'] else 'NO'} ({diff:+d} B)"


def table(found: list[dict]) -> str:
    lines = ["| precision | checkpointing | cell | advise MiB | measured MiB | error | state exact |",
             "|---|---|---|---|---|---|---|"]
    mib = 2**20
    for r in found:
        if r["measured"] is None or r["predicted"] is None:
            lines.append(f"| {r['precision']} | {r['checkpointing']} | {r['cell']} | — | — | {r['status']} | — |")
            continue
        err = (r["predicted"] - r["measured"]) / r["measured"]
        flag = "" if abs(err) <= TOLERANCE else " ✗"
        lines.append(f"| {r['precision']} | {r['checkpointing']} | {r['cell']} | {r['predicted'] / mib:.1f} | "
                     f"{r['measured'] / mib:.1f} | {err * 100:+.1f} %{flag} | {_state_words(r)} |")
    measured = [r for r in found if r["measured"] is not None and r["predicted"] is not None]
    within = sum(abs(r["predicted"] - r["measured"]) / r["measured"] <= TOLERANCE for r in measured)
    exact = sum(bool(r["state_ok"]) for r in measured)
    lines.append(f"\n{within} of {len(measured)} cells within {TOLERANCE:.0%}; state exact in {exact}.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="folder for the compare runs (one per precision and mode)")
    p.add_argument("--table", type=Path, help="only print the table of the runs in this folder")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--nproc", default="2,4")
    p.add_argument("--precision", default=",".join(PRECISIONS))
    p.add_argument("--checkpointing", default=",".join(MODES))
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)  # 2 warm-up, 3 profiled for the peak, 3 timed
    p.add_argument("--record", type=Path, help="also write the measurements the suite holds the model to (JSON); "
                   "the cells already in the file that this run did not measure again are kept")
    args = p.parse_args()
    if args.table is None and args.out is None:
        p.error("give --out DIR to run the grid, or --table DIR to print what a run wrote")
    if args.table is None:
        run_grid(args.out, args.methods.split(","), [int(n) for n in args.nproc.split(",")],
                 args.precision.split(","), args.checkpointing.split(","), args.width, args.depth, args.steps)
    print(table(rows(args.table or args.out)))
    if args.record:
        args.record.write_text(json.dumps(merged(args.record, record(args.table or args.out)), indent=1) + "\n")


if __name__ == "__main__":
    main()
