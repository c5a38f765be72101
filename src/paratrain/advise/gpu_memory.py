"""What a GPU adds on top of the tensors `rank_memory` counts: the caching allocator's high-water mark.

`rank_memory` counts tensors: on a GPU that is the peak of ``torch.cuda.max_memory_allocated()`` (torch's "peak
active"). What a run needs from the device is more: the caching allocator keeps freed blocks for reuse, and its
high-water mark, ``max_memory_reserved()``, is what decides an out-of-memory error. Published GPU runs report one
or the other (torchtitan logs the reserved peak), so `advise` reports both.

The gap is not a fixed share of the total. The model state is allocated once, in large blocks that stay alive, and
does not fragment; what fragments is the working set that is allocated and freed over and over within a step: the
activations of one block, recomputed, kept and freed again in backward, and their gradients, in sizes that do not
match the free blocks left by the previous block. So the gap is counted in units of one transformer block's saved
activations (:func:`paratrain.advise.activations.per_layer_bytes` at the plan's micro-batch and sequence length):
``reserved = allocated + FRAGMENTATION_BLOCKS × one block's activations``.

``FRAGMENTATION_BLOCKS`` is fitted on published pairs of peak active and peak reserved memory, and validated on
others (``tests/advise/published_runs.py``, ``tests/advise/test_published.py``; docs/advise.md, "Against published
GPU runs"). A multiple of the total (reserved = k × allocated) was tried first and rejected: the published gaps are
8.3–9.9 GiB both at 23 GiB and at 50 GiB of allocated memory, and a multiple cannot match both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from paratrain.advise import activations
from paratrain.advise.memory import Plan, RankMemory
from paratrain.advise.models import ModelSpec

# Fitted on torchtitan's FSDP2 runs of Llama 2 7B (8 H100s, micro-batch 8, 2,048 tokens, full and per-op selective
# checkpointing): 2.91 and 3.47 blocks of the gap; their mean, rounded. Validated on the FSDP1 runs of the same
# set-up (3.01 and 4.76 blocks) and on Llama 3.1 8B at 8 GPUs (one and two samples each) and at 128:
# tests/advise/test_published.py.
FRAGMENTATION_BLOCKS = 3.2


@dataclass(frozen=True)
class DeviceMemory:
    """One rank's GPU memory: ``allocated`` (peak of the tensors, what `rank_memory` counts) and ``reserved`` (the
    caching allocator's peak, what runs out first)."""

    allocated: int
    reserved: int

    def to_json(self) -> dict[str, int]:
        return {"allocated": self.allocated, "reserved": self.reserved}


def block_activation_bytes(model: ModelSpec, plan: Plan, tp: int = 1) -> int:
    """One transformer block's saved activations at the plan's micro-batch and sequence length (each rank's share
    under tensor parallelism over ``tp``); 0 when the architecture is unknown."""
    arch = model.transformer
    if arch is None:
        return 0
    if plan.seq_len and plan.seq_len != arch.seq_len:
        arch = replace(arch, seq_len=plan.seq_len)
    elem = 4 if plan.precision == "fp32" else 2
    return activations.per_layer_bytes(arch, plan.micro_batch, elem, tp)


def fragmentation_bytes(model: ModelSpec, plan: Plan, tp: int = 1) -> int:
    """What the caching allocator holds beyond the peak of the tensors: FRAGMENTATION_BLOCKS blocks' activations."""
    return round(FRAGMENTATION_BLOCKS * block_activation_bytes(model, plan, tp))


def device_memory(model: ModelSpec, plan: Plan, rank: RankMemory, tp: int = 1) -> DeviceMemory:
    """Allocated and reserved peaks of one rank whose tensors `rank_memory` counted as ``rank``."""
    allocated = rank.total
    return DeviceMemory(allocated=allocated, reserved=allocated + fragmentation_bytes(model, plan, tp))
