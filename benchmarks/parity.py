"""Is `paratrain run` ever slower than the native way to start the same job?

    python benchmarks/parity.py [--repeats 5] [--steps 1000] [--workload mlp] [--methods single,ddp]

Runs one Session script (the bundled workload trainer) natively — `python train.py` for one process,
`torchrun --standalone --nproc-per-node 2 train.py` for DDP — and through `paratrain run` with the same method
(both launchers through their installed commands, as a user types them), interleaved (the order flips every
round) so that machine noise hits both alike. Nothing is tuned for either side: OMP_NUM_THREADS is removed from
the environment, so each gets its default thread count.

Prints, per method, medians over the rounds of: wall time (launch to exit), start-up (launch to the end of the
first optimizer step) and throughput (samples/s over the steps after warm-up). The diff and ratio columns are the
medians of the per-round paratrain − native differences and paratrain/native ratios (the two runs of a round are
back to back, so slow drifts of a shared machine cancel), with the range of the ratios. Targets: wall ≤ 1.02 ×
native + 0.2 s; start-up ≤ native + 0.2 s for one process, + 0.1 s under torchrun; throughput ≥ 0.99 × native.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "src" / "paratrain" / "workloads" / "train.py"
WARMUP = 10
BIN = Path(sys.executable).parent


def _command(name: str, module: str) -> list[str]:
    """The installed command beside this interpreter (what a user runs), else `python -m` its module."""
    return [str(BIN / name)] if (BIN / name).exists() else [sys.executable, "-m", module]


TORCHRUN = [*_command("torchrun", "torch.distributed.run"), "--standalone", "--nproc-per-node", "2"]
PARATRAIN = [*_command("paratrain", "paratrain.cli.main"), "run"]
STARTUP_BUDGET = {"single": 0.2, "ddp": 0.1}  # seconds over native
METHODS = {  # method -> (native command, paratrain command), each followed by the script and its arguments
    "single": ([sys.executable], [*PARATRAIN, "--strategy", "single"]),
    "ddp": (TORCHRUN, [*PARATRAIN, "--strategy", "ddp", "--nproc", "2"]),
}


def measure(cmd: list[str], folder: Path) -> dict[str, float]:
    """One run: wall, start-up and throughput, from the Session's own per-step records."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARATRAIN_") and k != "OMP_NUM_THREADS"}
    env["PARATRAIN_METRICS"] = str(folder)
    launch = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - launch
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in (folder / "rank0.jsonl").read_text().splitlines()]
    steps = [r for r in records if "step" in r]
    timed = steps[WARMUP:]
    per_step = statistics.median(r["dt"] for r in timed)
    samples = statistics.median(r["samples"] for r in timed)
    world = len(list(folder.glob("rank*.jsonl")))
    return {"wall": wall, "startup": steps[0]["t"] - launch, "throughput": samples * world / per_step}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--workload", default="mlp")
    p.add_argument("--methods", default="single,ddp")
    args = p.parse_args()
    script = [str(TRAIN), "--workload", args.workload, "--steps", str(args.steps)]
    print(f"{'method':7} {'what':10} {'native':>8} {'paratrain':>9} {'diff':>7} {'ratio':>6} {'range':>13}  target")
    for method in args.methods.split(","):
        native_cmd, pt_cmd = METHODS[method]
        runs: dict[str, list[dict[str, float]]] = {"native": [], "paratrain": []}
        for i in range(args.repeats):
            order = [("native", native_cmd), ("paratrain", pt_cmd)]
            for name, cmd in order if i % 2 == 0 else reversed(order):
                with tempfile.TemporaryDirectory() as tmp:
                    runs[name].append(measure([*cmd, *script], Path(tmp)))
        for what, unit, target in (("wall s", "wall", "≤ 1.02× + 0.2 s"),
                                   ("start-up s", "startup", f"≤ +{STARTUP_BUDGET[method]} s"),
                                   ("samples/s", "throughput", "≥ 0.99×")):
            native = statistics.median(r[unit] for r in runs["native"])
            ours = statistics.median(r[unit] for r in runs["paratrain"])
            pairs = list(zip(runs["native"], runs["paratrain"], strict=True))
            ratios = [p[unit] / n[unit] for n, p in pairs]
            diff = statistics.median(p[unit] - n[unit] for n, p in pairs)
            ratio = statistics.median(ratios)
            ok = ""
            if unit == "wall":
                ok = "ok" if ours <= 1.02 * native + 0.2 else "MISSED"
            elif unit == "startup":
                ok = "ok" if diff <= STARTUP_BUDGET[method] else "MISSED"
            elif unit == "throughput":
                ok = "ok" if ratio >= 0.99 else "MISSED"
            print(f"{method:7} {what:10} {native:8.2f} {ours:9.2f} {diff:+7.2f} {ratio:6.3f} "
                  f"{min(ratios):6.3f}–{max(ratios):.3f}  {target} {ok}".rstrip())


if __name__ == "__main__":
    main()
