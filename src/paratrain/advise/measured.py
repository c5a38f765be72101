"""What ``paratrain compare`` measured on the same model, read from the run history.

A run's cells carry ``param_count`` (the whole model's); a cell counts when it equals the model being advised on,
so a bundled workload, a ``--model`` factory and an exact ``--params`` all find their measurements. A cell counts
only at the world size being planned for (ddp×2 says nothing about ddp×8), single×1 always, as the reference;
the newest run that measured the model wins.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paratrain.bench import store
from paratrain.errors import ParatrainError

RUNS_READ = 200


def measurements(params: int, world: int, db: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``{method spec: {"key", "nproc", "speedup" (throughput ÷ the same run's single×1), "run"}}``."""
    try:
        runs = store.list_runs(db, limit=RUNS_READ)
    except ParatrainError:  # no history yet: nothing measured, which is not an error for advise
        return {}
    found: dict[str, dict[str, Any]] = {}
    for run in runs:
        results = store.load_run(run["id"], db)
        cells = [c for c in results.get("cells", []) if c.get("status") == "ok" and c.get("samples_per_s")
                 and c.get("param_count") == params and c.get("equivalence") != "not_equivalent"]
        ref = next((c for c in cells if c["strategy"] == "single" and c["nproc"] == 1), None)
        if ref is None:
            continue
        for cell in cells:
            if cell["nproc"] == world or cell is ref:
                found[advise_spec(cell["strategy"])] = {
                    "key": cell["key"], "nproc": cell["nproc"], "run": results["id"],
                    "speedup": cell["samples_per_s"] / ref["samples_per_s"]}
        if found:
            break  # the newest run that measured this model speaks for it
    return found


def advise_spec(strategy: str) -> str:
    """A compare cell's method in advise's spelling: compare writes the normalised spec (``deepspeed`` for ZeRO-2,
    ``deepspeed:zero_stage=3,offload=all``); advise names its rows ``deepspeed:zero2``,
    ``deepspeed:zero3,offload=all``."""
    name, _, rest = strategy.partition(":")
    if name != "deepspeed":
        return strategy
    opts = dict(part.split("=", 1) for part in rest.split(",") if "=" in part)
    stage = opts.pop("zero_stage", "2")
    extra = "".join(f",{k}={v}" for k, v in opts.items() if k == "offload")
    return f"deepspeed:zero{stage}{extra}"
