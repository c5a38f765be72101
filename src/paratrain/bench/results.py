"""The shape of compare's results, declared once: every key of a cell with its type and its "not measured" value,
and the schema version results.json and the history database carry.

Cells travel as plain dicts (results.json is the contract users read, and older runs in the history must still
load), but no module invents a key any more: :func:`complete` gives a cell every key :class:`CellResult` declares,
and the suite checks that ``docs/results-schema.md`` documents exactly these. A change of meaning or a removed key
raises :data:`SCHEMA_VERSION`; readers of the history see which version a run was written with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# 1: results before the version was recorded (no "schema_version" key). 2: every key of CellResult in every cell,
# the canonical spec spelling (deepspeed:zero2, never a bare deepspeed).
SCHEMA_VERSION = 2


@dataclass
class CellResult:
    """One cell of a comparison: a method at one process count. See docs/results-schema.md for each key."""

    # identity and outcome
    key: str = ""
    strategy: str = ""
    spec: str = ""
    nproc: int = 0
    framework: str = "torch"
    status: str = "unavailable"
    error: str | None = None
    log: str | None = None
    wall_s: float | None = None
    # speed
    step_times_s: list[float] = field(default_factory=list)
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    startup_s: float | None = None
    epoch_wall_s: float | None = None
    epochs_done: int | None = None
    scaling_efficiency: float | None = None
    scaling_efficiency_note: str | None = None
    threads_per_process: int | None = None
    oversubscribed: bool = False
    other_load: float | None = None  # cores busy with other work while it ran (bench/load.py)
    disturbed: str | None = None  # why its figures are not comparable with the other cells' (bench/disturbance.py)
    remeasured: str | None = None  # why it was run again, and what the first run gave
    # where the time goes
    breakdown: dict[str, float] | None = None
    breakdown_slowest: dict[str, float] | None = None
    comm_bytes_per_step: int | None = None
    bus_gbps: float | None = None
    collectives_per_step: dict[str, float] | None = None
    comm_bytes_by_kind: dict[str, int] | None = None  # bytes this rank sent per step, by collective (all_reduce, send…)
    comm_share: float | None = None
    # memory and model
    peak_mem_bytes: list[int | None] = field(default_factory=list)
    peak_mem_kind: str = "rss"
    peak_reserved_bytes: list[int | None] | None = None  # GPUs: CUDA's max reserved per rank; None elsewhere
    state_bytes: list[int | None] = field(default_factory=list)
    predicted_mem: dict[str, Any] | None = None
    over_budget: str | None = None
    param_count: int | None = None
    model: dict[str, Any] | None = None
    # loss and equivalence
    losses: list[float] = field(default_factory=list)
    final_loss: float | None = None
    tolerance: float | None = None
    loss_max_abs_diff: float | None = None
    loss_mean_abs_diff: float | None = None
    equivalence: str | None = None
    equivalence_reason: str = "not compared"
    equivalence_causes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


# Keys a cell carries only sometimes: steps_done in cells that ran, repeats and repeat_samples_per_s when one of
# their runs finished, comm_measured only where it is false (the profiler cannot see the method's collectives).
OCCASIONAL = {"steps_done": int, "repeats": int, "repeat_samples_per_s": list, "comm_measured": bool}
KEYS = tuple(f.name for f in dataclasses.fields(CellResult))


def complete(cell: dict[str, Any]) -> dict[str, Any]:
    """Give ``cell`` every declared key it lacks, at its "not measured" value (a fresh list or dict each time)."""
    for name, value in dataclasses.asdict(CellResult()).items():
        cell.setdefault(name, value)
    return cell


def schema_version(results: dict[str, Any]) -> int:
    """The version a results dict was written with (1: before versions were recorded)."""
    return int(results.get("schema_version") or 1)
