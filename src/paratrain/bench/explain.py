"""Why the numbers are what they are: each cell's time breakdown as a table, and the sentences the recommendation
adds from it ("ddp×2 spends 61 % of each step in exposed all-reduce: ...").

Kept apart from report.py, which renders the comparison itself; both read only the results dict.
"""

from __future__ import annotations

from typing import Any

PARTS = (("compute_s", "compute"), ("comm_exposed_s", "exposed comm"), ("bubble_s", "pipeline bubble"),
         ("data_s", "data"), ("optimizer_s", "optimizer"), ("other_s", "other"))
NOT_MEASURED = "not measured"
BOUND_SHARE = 0.25  # exposed communication above this share of a step is what a cell is up against
OPS = {"all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
       "broadcast": "broadcast", "send": "send/recv"}


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:.1f}"


def _cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in results.get("cells") or [] if c.get("status") == "ok" and c.get("breakdown")]


def breakdown_markdown(results: dict[str, Any]) -> list[str]:
    """The per-cell table: median step in ms split into its parts, overlapped communication, bytes and bandwidth."""
    cells = _cells(results)
    if not cells:
        return ["No cell recorded a breakdown (runs too short to profile, or results from an older paratrain)."]
    head = ["cell", "step ms", *(label for _, label in PARTS), "overlapped comm", "MB sent/step", "by kind",
            "bus GB/s"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c in cells:
        b = c["breakdown"]
        unseen = not comm_measured(c)
        overlapped = None if unseen else max(0.0, (b.get("comm_total_s") or 0.0) - (b.get("comm_exposed_s") or 0.0))
        sent = c.get("comm_bytes_per_step")
        parts = [NOT_MEASURED if unseen and k == "comm_exposed_s" else _ms(b.get(k)) for k, _ in PARTS]
        rows.append("| " + " | ".join([
            c["key"], _ms(b["step_s"]), *parts, _ms(overlapped),
            "—" if sent is None else f"{sent / 1e6:.2f}", _by_kind(c),
            "—" if c.get("bus_gbps") is None else f"{c['bus_gbps']:.2f}"]) + " |")
    notes = ["Measured with the torch profiler over 3 steps after warm-up (left out of the throughput), as fractions "
             "applied to the median unprofiled step; rank 0 shown (the slowest rank's split is in results.json). "
             "Exposed communication is time the main thread waited for a collective; overlapped ran during compute. "
             "The pipeline bubble (pp) is the time a stage waited for its neighbours inside the schedule, timed "
             "around the stage's own forward and backward."]
    if any(not comm_measured(c) for c in cells):
        notes.append(f"{NOT_MEASURED}: the torch profiler does not see Horovod's collectives (they run in Horovod's "
                     "own background thread), so its communication is unknown — not zero; the time spent waiting for "
                     "it is counted in the other parts.")
    return [*rows, "", *notes]


def _by_kind(cell: dict[str, Any]) -> str:
    """"all-reduce 1.20, send/recv 0.40": the megabytes each kind of collective sent per step."""
    kinds = cell.get("comm_bytes_by_kind") or {}
    return ", ".join(f"{OPS.get(k, k)} {v / 1e6:.2f}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])) or "—"


def comm_measured(cell: dict[str, Any]) -> bool:
    """False for a cell whose collectives the profiler could not see (Horovod's): its communication is unknown."""
    return cell.get("comm_measured", True) is not False


def _main_op(cell: dict[str, Any]) -> str:
    ops = cell.get("collectives_per_step") or {}
    return OPS.get(max(ops, key=ops.get), "communication") if ops else "communication"


def bound_lines(results: dict[str, Any], winner: str | None) -> list[str]:
    """One sentence per multi-process cell that spends a large share of its step waiting on communication."""
    lines = []
    for c in _cells(results):
        share = c.get("comm_share")
        if c.get("nproc", 1) < 2 or share is None or share < BOUND_SHARE or c["key"] == winner:
            continue
        sent = c.get("comm_bytes_per_step") or 0
        bw = f" at {c['bus_gbps']:.2f} GB/s" if c.get("bus_gbps") else ""
        lines.append(f"{c['key']} spends {share * 100:.0f} % of each step in exposed {_main_op(c)} "
                     f"({sent / 1e6:.2f} MB per step{bw}): the model is too small for {c['nproc']} processes on "
                     "this link — a larger model or batch, or a faster link, would change that.")
    return lines
