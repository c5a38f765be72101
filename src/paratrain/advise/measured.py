"""What ``paratrain compare`` measured on the same model, read from the run history.

A run's cells carry ``param_count`` (the whole model's); a cell counts when it equals the model being advised on,
so a bundled workload, a ``--model`` factory and an exact ``--params`` all find their measurements. A cell counts
only at the world size being planned for (ddp×2 says nothing about ddp×8), single×1 always, as the reference.
The newest run that measured the model on GPUs wins, else the newest that measured it at all: ``advise`` plans for
GPUs, and a CPU run (gloo) says little about them, so ``recommend`` sets such measurements aside and says so.

Each measurement keeps what ``compare`` knew about its reliability: ``noise``, the relative throughput difference
that run treats as a tie (``bench.recommend.noise``: 5 %, or the widest run-to-run spread ``--repeat`` measured), so
advise calls a tie a tie instead of ranking one method above another on a difference the run could not resolve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paratrain.bench import store
from paratrain.bench.recommend import noise, spread
from paratrain.errors import ParatrainError

RUNS_READ = 200


def measurements(params: int, world: int, db: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """``{method spec: {"key", "nproc", "speedup" (throughput ÷ the same run's single×1), "run", "device"
    ("gpu" or "cpu"), "where" (e.g. "CPU (gloo)"), "spread", "noise"}}``, from one run (see the module doc)."""
    try:
        runs = store.list_runs(db, limit=RUNS_READ)
    except ParatrainError:  # no history yet: nothing measured, which is not an error for advise
        return {}
    fallback: dict[str, dict[str, Any]] = {}
    for run in runs:
        found = _from_run(store.load_run(run["id"], db), params, world)
        if found and all(m["device"] == "gpu" for m in found.values()):
            return found
        fallback = fallback or found
    return fallback


def _from_run(results: dict[str, Any], params: int, world: int) -> dict[str, dict[str, Any]]:
    """One run's measurements of this model at this world size; empty without a single×1 reference."""
    cells = [c for c in results.get("cells", []) if c.get("status") == "ok" and c.get("samples_per_s")
             and c.get("param_count") == params and c.get("equivalence") != "not_equivalent"]
    ref = next((c for c in cells if c["strategy"] == "single" and c["nproc"] == 1), None)
    if ref is None:
        return {}
    tie = noise(cells, results)  # what compare itself calls a tie in this run
    env = results.get("env") or {}
    found = {}
    for cell in cells:
        if cell["nproc"] == world or cell is ref:
            device = device_of(cell, env)
            found[advise_spec(cell.get("spec") or cell["strategy"])] = {
                "key": cell["key"], "nproc": cell["nproc"], "run": results["id"],
                "speedup": cell["samples_per_s"] / ref["samples_per_s"], "device": device,
                "where": _where(cell, device), "spread": spread(cell), "noise": tie}
    return found


def device_of(cell: dict[str, Any], env: dict[str, Any]) -> str:
    """``"gpu"`` or ``"cpu"``: where a compare cell trained.

    A CUDA memory peak is only recorded by a cell that trained on a GPU; without one, the cell ran on a GPU only if
    the machine had one visible (paratrain's torch methods take a visible GPU when there is one, else the CPU with
    gloo). Results without an inventory (older runs) count as CPU: nothing says a GPU was there.
    """
    if cell.get("peak_mem_kind") == "cuda":
        return "gpu"
    inventory = env.get("inventory") or {}
    return "gpu" if inventory.get("visible") else "cpu"


def _where(cell: dict[str, Any], device: str) -> str:
    """How to name the place a cell ran, for one line of advise: ``CPU (gloo)`` for a multi-process torch run."""
    if device == "gpu":
        return "GPU"
    return "CPU (gloo)" if cell.get("nproc", 1) > 1 and not _keras(cell["strategy"]) else "CPU"


def _keras(strategy: str) -> bool:
    return strategy.partition(":")[0] in ("multiworker", "mirrored")


def advise_spec(strategy: str) -> str:
    """A compare cell's method in the canonical spelling advise's rows use (``deepspeed:zero2``), whatever spelling
    the history holds (older runs wrote ``deepspeed`` for ZeRO-2 and ``deepspeed:zero_stage=3``)."""
    from paratrain.errors import ParatrainError
    from paratrain.strategies import registry
    from paratrain.strategies.base import format_spec

    try:
        cls, options = registry.resolve(strategy)
    except ParatrainError:
        return strategy  # a method this version does not know: its row simply has no match
    return format_spec(cls.method, options)
