"""compare's memory budget (``--memory-per-rank``): which cells cannot fit a rank's memory, before and after running.

It builds on advise's memory model only (``advise/memory.py``, ``models.py``, ``methods.py``), which imports
nothing of ``bench/``: the rest of ``advise/`` builds on ``bench/`` (the history, the tie rule), not the other way.

Why: the sharded methods exist because a model's training state outgrows one device. A comparison that runs every
cell on a machine where the model fits everywhere can only ever say "single" or "ddp". With a budget, each cell of
a bundled workload is first sized by advise's memory model (the same one ``paratrain advise`` ranks methods by, on
the real module's shapes); a cell predicted not to fit is not started — on a GPU it would only run out of memory —
and says what it would need. A cell that runs is then held to the budget by its measured peak (CUDA's max
allocated, or a CPU's tensor peak), since a prediction is not a measurement; a CPU's RSS peak counts far more than
tensors (see :func:`over`) and is only shown beside the prediction, with how far above the budget it went.

On GPUs the default budget is the device's memory less what the CUDA context and the allocator take (advise's
:data:`~paratrain.advise.memory.USABLE` share); on a CPU there is none unless asked for, and the measured peak is
the CPU tensors' peak over the profiled steps (``tensor_peak.py``), or the RSS high-water mark above each rank's
Session start where a cell was not profiled (``peak_mem_kind``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paratrain.advise.memory import RankMemory
    from paratrain.advise.models import ModelSpec

GIB = 1 << 30


@dataclass(frozen=True)
class Budget:
    bytes: int
    source: str  # "--memory-per-rank" or "the GPU's memory"

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "source": self.source}


def resolve(memory_per_rank: float | None, gpus: int) -> Budget | None:
    """The budget a comparison runs under: the flag's, else on GPUs the smallest device's usable memory."""
    if memory_per_rank is not None:
        return Budget(int(memory_per_rank * GIB), "--memory-per-rank")
    if not gpus:
        return None
    import torch

    from paratrain.advise.memory import USABLE

    total = min(torch.cuda.get_device_properties(i).total_memory for i in range(gpus))
    return Budget(int(total * USABLE), "the GPU's memory")


@cache
def _model(workload: str, width: int | None, depth: int | None) -> ModelSpec:
    from paratrain.advise.models import from_bundled

    if workload.startswith("hf:"):
        from paratrain.advise.models import from_hf

        return from_hf(workload, width, depth)
    return from_bundled(workload, width, depth)


def predict(spec: str, nproc: int, *, workload: Any, width: int | None, depth: int | None, precision: str | None,
            checkpointing: bool | str, weak: bool) -> RankMemory | None:
    """What the busiest rank (rank 0) of this cell holds, by advise's model; None where advise has no model of it
    (a user's script, a method or precision it does not size)."""
    import torch

    from paratrain.advise import memory
    from paratrain.advise.methods import all_methods
    from paratrain.strategies import registry
    from paratrain.strategies.base import format_spec

    cls, options = registry.resolve(spec)
    autocast = getattr(options, "mixed", "params") == "autocast"  # the sharded methods' autocast option
    if autocast:
        options = dataclasses.replace(options, mixed="params")
    canonical = format_spec(cls.method, options)  # advise's rows use the canonical spelling (deepspeed:zero2)
    method = next((m for m in all_methods() if m.spec == canonical), None)
    if method is None or (precision or "fp32") not in memory.PRECISIONS:
        return None
    sharding = dataclasses.replace(method.sharding, sixteen_bit="") if autocast else method.sharding
    replicas = sharding.replicas(nproc)  # tensor and pipeline parallel: every rank computes the batch
    micro = workload.global_batch if weak else math.ceil(workload.global_batch / replicas)
    plan = memory.Plan(ranks=nproc, micro_batch=micro, seq_len=workload.tokens_per_sample,
                       precision=precision or "fp32", checkpointing=checkpointing,
                       optimizer="sgd-momentum" if workload.momentum is not None else "adamw",
                       backend="nccl" if torch.cuda.is_available() else "gloo")
    return memory.rank_memory(_model(workload.name, width, depth), sharding, plan, rank=0)


def size_cell(spec: str, nproc: int, settings: Any, workload: Any, budget: Budget | None,
              framework: str) -> tuple[dict[str, Any] | None, str | None]:
    """(advise's bytes for the cell's busiest rank, why it is not started) — (None, None) where advise cannot size
    it: a user's script, a Keras cell."""
    if workload is None or framework != "torch":
        return None, None
    mem = predict(spec, nproc, workload=workload, width=settings.width, depth=settings.depth,
                  precision=settings.precision, weak=settings.scaling == "weak",
                  checkpointing=settings.activation_checkpointing)
    return (mem.to_json() if mem is not None else None), misfit(mem, budget)


def refuse_if_none_fit(unfit: list[tuple[str, str]], budget: Budget | None) -> None:
    """Before anything runs: when the budget leaves no cell to run, one line naming what each would need."""
    if not unfit or budget is None:
        return
    from paratrain.errors import ConfigError

    limit = f", {gib(budget.bytes)} budget ({budget.source})"
    raise ConfigError(f"no requested method fits {gib(budget.bytes)} per rank ({budget.source}): "
                      + "; ".join(f"{key} {why.removeprefix('does not fit: ').removesuffix(limit)}"
                                  for key, why in unfit),
                      hint="add sharded methods (fsdp, deepspeed:zero3) or more processes (--nproc), or raise "
                           "--memory-per-rank")


def need_words(mem: RankMemory) -> str:
    """``needs 1.2 GiB per rank (states 1.0 GiB, activations 0.15 GiB, buffers 0.05 GiB)``."""
    parts = list(mem.peak_parts().items())[1:]
    shown = ", ".join(f"{name} {gib(value)}" for name, value in parts if value)
    return f"needs {gib(mem.total)} per rank ({shown})"


def misfit(mem: RankMemory | None, budget: Budget | None) -> str | None:
    """Why the cell is not started, or None when it may run."""
    if mem is None or budget is None or mem.total <= budget.bytes:
        return None
    return f"does not fit: {need_words(mem)}, {gib(budget.bytes)} budget ({budget.source})"


# Peaks that count no more than a GPU would hold: above the budget, the cell is over it. A CPU's tensor peak leaves
# out only what C++ alone holds (Horovod's fusion buffer), so a cell above the budget by it is above it in truth too.
HELD_KINDS = ("cuda", "cpu_tensors")


def _peak(cell: dict[str, Any]) -> int | None:
    peaks = [b for b in cell.get("peak_mem_bytes") or [] if b is not None]
    return max(peaks) if peaks else None


def over_by(cell: dict[str, Any], budget: Budget | None) -> int | None:
    """Bytes by which the cell's measured peak (its busiest rank) exceeded the budget, whatever it counts; else
    None."""
    peak = _peak(cell)
    return None if peak is None or budget is None or peak <= budget.bytes else peak - budget.bytes


def over(cell: dict[str, Any], budget: Budget | None) -> str | None:
    """Why a cell that ran broke the budget (its measured peak), or None.

    Only a peak that counts no more than a GPU would hold is held to the budget: CUDA's max allocated, and the CPU
    tensors' peak. A CPU's RSS high-water mark also holds the allocator's cached pages (a 24 M parameter llama:
    1.53 GiB of RSS for 0.92 GiB of tensors): the report says by how much it is above (:func:`over_by`) without
    judging the cell by it."""
    by, peak = over_by(cell, budget), _peak(cell)
    if by is None or peak is None or budget is None or cell.get("peak_mem_kind") not in HELD_KINDS:
        return None
    return f"over budget by {gib(by)}: its measured peak, {gib(peak)} per rank, is above the {gib(budget.bytes)} budget"


def gib(n: float) -> str:
    """Bytes as the budget's messages, the report and the recommendation write them: ``0.227 GiB``."""
    return f"{n / GIB:.3g} GiB"


def memory_markdown(results: dict[str, Any]) -> list[str]:
    """The report's memory section: advise's prediction beside the measured peak for every cell it sized, and the
    budget's verdict. Empty when no cell was sized (a user's script)."""
    rows = [c for c in results.get("cells") or [] if c.get("predicted_mem")]
    if not rows:
        return []
    budget = results.get("memory_budget")
    rss = any(c.get("peak_mem_kind") not in HELD_KINDS for c in rows if c.get("peak_mem_bytes"))
    out = [f"Budget: {gib(budget['bytes'])} per rank ({budget['source']})." if budget else
           "No memory budget (`--memory-per-rank GiB` sets one).",
           "Predicted by advise's memory model for the busiest rank; measured: the peak the cell's ranks reached "
           "(see the results table's footnote for what it counts here)."
           + (" A CPU's RSS peak is shown, not held to the budget, which is checked against the prediction: an "
              "RSS high-water mark also holds the allocator's cached pages." if rss else ""), "",
           "| cell | advise: states | activations | buffers | total | measured peak | verdict |",
           "|---|---|---|---|---|---|---|"]
    for cell in rows:
        mem = cell["predicted_mem"]
        peaks = [b for b in cell.get("peak_mem_bytes") or [] if b is not None]
        from paratrain.advise.memory import peak_parts

        alive = peak_parts(mem)  # at the peak
        state = alive["states"]
        if cell.get("status") == "does_not_fit":
            verdict = "does not fit: not started"
        elif cell.get("over_budget"):
            verdict = f"ran, over budget by {gib(max(peaks) - budget['bytes'])}"
        elif cell.get("status") != "ok":
            verdict = str(cell.get("status"))
        elif budget and peaks and max(peaks) > budget["bytes"]:
            verdict = (f"fits by advise; its {cell.get('peak_mem_kind') or 'rss'} peak is over budget by "
                       f"{gib(max(peaks) - budget['bytes'])} (it counts cached pages too)")
        else:
            verdict = "fits" if budget else "ran"
        acts = "not counted" if mem.get("activations") is None else gib(alive["activations"])
        out.append(f"| {cell['key']} | {gib(state)} | {acts} | {gib(alive['buffers'])} | {gib(mem['total'])} | "
                   f"{gib(max(peaks)) if peaks else '—'} | {verdict} |")
    return out
