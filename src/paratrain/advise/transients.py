"""What a sharded method holds for a moment rather than for the whole step: FSDP's gathered units as backward walks
the blocks, and ZeRO's copies of its gradient bucket as backward ends.

Why apart from the state and buffers (:mod:`paratrain.advise.memory`): these are alive at particular moments, and
the step's peak is the moment where they and the activations together are largest. Counting each at its busiest
beside the activations' peak put FSDP on the bundled llama ×4 10-15 % high; not counting ZeRO's reduction, which
peaks when the activations are gone, put ZeRO ×4 11-22 % low.
"""

from __future__ import annotations

from paratrain.advise.activations import Units
from paratrain.advise.models import ModelSpec


def compute_bytes(mode: str) -> int:
    """Bytes per element of the parameters a forward computes with, and of the gradients backward makes for them:
    16-bit when the method gathers bf16 copies (FSDP's mixed-precision policy) or the model is bf16 (bf16-true)."""
    return 2 if mode in ("gathered", "true") else 4


def reduce_bytes(mode: str) -> int:
    """Bytes per element of a gradient reduction's input: fp32 under every precision paratrain runs but bf16-true,
    which reduces the bf16 gradients it makes."""
    return 2 if mode == "true" else 4


def fsdp_units(model: ModelSpec, gathered: str, mode: str, p_b: int, params_held: int,
               backend: str = "nccl") -> Units | None:
    """What FSDP holds per unit as backward walks the blocks (:class:`~paratrain.advise.activations.Units`), or None
    for a method that gathers no units (``gathered`` as in ``Sharding``), or a model without a known architecture
    (then its busiest set is counted throughout). ``mode``: "gathered" under FSDP's bf16 mixed-precision policy,
    "true" under bf16-true (:func:`paratrain.advise.memory.sixteen_bit`);
    ``p_b``: bytes per parameter held; ``params_held``: the rank's parameter bytes."""
    arch = model.transformer
    if gathered not in ("unit", "all") or arch is None or not arch.layers:
        return None
    compute = compute_bytes(mode)
    attention, mlp = arch.block_matrices()
    block = min(attention + mlp * arch.experts + arch.norm_elements(), model.params / arch.layers)
    root = model.params - block * arch.layers
    head = min(root, arch.vocab * arch.hidden)
    if gathered == "unit":
        copy = float(compute)
    else:  # every parameter's unsharded copy (bf16: cast from the whole fp32 ones), beside what the rank holds;
        # over a one-rank shard group (shard=none) FSDP2 still copies every parameter into an unsharded buffer of its
        # own: 11.4 MiB allocated in FSDP::pre_forward by the bundled llama ×4 in fp32, the whole model
        whole = model.params * (2 if mode == "gathered" else p_b)
        if mode != "gathered" and params_held < whole:
            whole -= params_held
        copy = whole / model.params
    return Units(gathered=round(block * copy), grads=round(block * compute), reduce=round(block * reduce_bytes(mode)),
                 root=round(root * copy), root_grads=round(head * compute), kept=gathered == "all",
                 ahead=2 if backend == "nccl" else 0)


def zero_reduction(layout: str, backend: str, bucket: int, g_b: int, through_backward: int, reused: int) -> int:
    """What ZeRO's reduction of its full bucket (``bucket`` elements: one, as large as the model, by
    deepspeed_config.size_buckets) holds beside its buffers as backward ends. ZeRO-3 (``layout`` "tensor")
    concatenates the bucket's partitions into one fp32 tensor to reduce-scatter
    (coalesced_collectives.reduce_scatter_coalesced), which gloo copies again, and has let go of the ``reused``
    bytes of parameters it gathered. ZeRO-1/2 in the bf16 mode (``g_b`` 2) flatten the bf16 bucket and cast it to
    fp32 to reduce it, and ZeRO-1 has cleared the ``through_backward`` bytes of p.grad it held through backward.
    Measured on the bundled llama ×4 in bf16-mixed under checkpointing, where this is the peak: 11.4 + 11.4 MiB at
    ZeRO-3, 5.7 + 11.4 MiB at ZeRO-2 (within 0.1 MiB of the rank's measured peak)."""
    if layout == "tensor":
        return bucket * 4 * (2 if backend == "gloo" else 1) - reused
    if g_b == 4:  # reduced in the gradients' own dtype, in place
        return 0
    return bucket * (g_b + 4) - through_backward
