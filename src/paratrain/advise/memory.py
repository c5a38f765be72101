"""Bytes each rank holds, per method: parameters, gradients, optimizer state, activations and working buffers.

The accounting is the ZeRO paper's (Rajbhandari et al. 2020): with Ψ parameters, mixed-precision Adam holds 2Ψ
of 16-bit parameters, 2Ψ of 16-bit gradients and KΨ = 12Ψ of fp32 master weights, momentum and variance; ZeRO
stage 1 divides K by N ranks, stage 2 the gradients too, stage 3 everything. That is DeepSpeed's bf16 mode; under
bf16-mixed each method holds what it runs (``Sharding.sixteen_bit``, :func:`element_bytes`): the replicated
methods keep fp32 weights under autocast, FSDP keeps fp32 shards and gathers bf16 copies. FSDP's
``full``/``grad_op`` shard like stage 3 / stage 2 at rest. When the module's shapes are known the split is exact
per rank, in the layout each method really uses, so the figures equal what `compare` measures on real runs byte for byte
(``tests/advise/test_calibration.py``, ``tests/strategies/test_deepspeed.py``):
- ``chunk`` (FSDP2): each parameter cut along its first dimension the way ``torch.chunk`` cuts it;
- ``flat`` (DeepSpeed ZeRO-1/2): all parameters in one flat buffer padded to a multiple of 2N and cut at element
  granularity; a rank holds the gradients of every tensor that overlaps its partition whole until the step;
- ``tensor`` (DeepSpeed ZeRO-3): each tensor flattened and cut in N, and tensors under DeepSpeed's persistence
  threshold also kept whole on every rank.
``bf16-true`` casts the model itself to bf16 under every method that takes it (single, dp, ddp, fsdp): 2 + 2 bytes of
parameters and gradients, the optimizer's state in bf16 too and no master copy, everything gathered, reduced and
computed in bf16 (mode ``true`` below); the methods that refuse it are not ranked under it.
DeepSpeed also keeps an fp32 master copy of its partition when training in fp32 (``master``), and allocates its
gradient-reduction bucket whole (``reduce_bucket``: the model's size up to 5e8 elements, as paratrain configures it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from paratrain.advise import activations, transients
from paratrain.advise.models import ModelSpec
from paratrain.advise.transients import compute_bytes, reduce_bytes
from paratrain.strategies.costs import ZERO3_MAX_REUSE_DISTANCE, ZERO_REDUCE_BUCKET, Sharding

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-true")
AUTOCAST = ("bf16-mixed", "fp16-mixed")  # 16-bit compute over fp32 weights, under every method paratrain runs
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}  # fp32 tensors per parameter
ADAM_STEP_BYTES = 4  # torch's Adam keeps its step count as a one-element fp32 tensor per parameter tensor
HOROVOD_FUSION_BYTES = 64 * 1024 * 1024  # HOROVOD_FUSION_THRESHOLD's default
USABLE = 0.9  # of a GPU's memory for the allocator's reserved peak: the CUDA context and NCCL's buffers take the rest


@dataclass(frozen=True, kw_only=True)
class Plan:
    """The training set-up being sized: N ranks, per-rank micro-batch, precision, optimizer, checkpointing."""

    ranks: int
    micro_batch: int = 1
    seq_len: int | None = None
    precision: str = "fp32"
    optimizer: str = "adamw"
    checkpointing: bool | str = False  # False (none) or a mode of paratrain/ac_modes.py; True: full
    backend: str = "nccl"  # the collectives' backend: gloo's reduce-scatter works on a copy of its input


@dataclass
class RankMemory:
    """Bytes on the busiest rank's device, and in its host memory (offloaded state)."""

    params: int = 0
    grads: int = 0
    optimizer: int = 0
    activations: int | None = 0
    buffers: int = 0
    host: int = 0
    # Gradients counted in ``grads`` that backward has not made yet when the step peaks (activations.activation_peak)
    grads_unmade: int = 0
    # What the gradient reduction holds for a moment as backward ends, beyond the buffers, when the activations are
    # gone (ZeRO's flattened and cast copies of its bucket): the step's other peak
    reduction: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def state(self) -> int:
        """Model state: what ``compare`` records as ``state_bytes``."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> int:
        """The step's peak: the state and buffers, and the larger of the activations (less the gradients not made
        yet at that moment) and the reduction's copies at the end of backward."""
        return self.state + self.buffers + max((self.activations or 0) - self.grads_unmade, self.reduction)

    def peak_parts(self) -> dict[str, int]:
        """What is alive at the step's peak, by kind (:func:`peak_parts`); the parts sum to :attr:`total`."""
        return peak_parts(self.to_json())

    def to_json(self) -> dict[str, int | None]:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer,
                "activations": self.activations, "buffers": self.buffers, "host": self.host,
                "grads_unmade": self.grads_unmade, "reduction": self.reduction, "total": self.total}


def peak_parts(mem: dict) -> dict[str, int]:
    """{grads, states, activations, buffers} alive at the peak of a :meth:`RankMemory.to_json` dict: at the
    activations' moment the gradients made by then; at the reduction's, every gradient, no activations, and the
    reduction's copies with the buffers. One place for the tables that show the parts of a total."""
    activations, unmade, reduction = mem.get("activations") or 0, mem.get("grads_unmade", 0), mem.get("reduction", 0)
    at_reduction = reduction > activations - unmade
    grads = mem["grads"] - (0 if at_reduction else unmade)
    return {"grads": grads, "states": mem["params"] + grads + mem["optimizer"],
            "activations": 0 if at_reduction else activations,
            "buffers": mem["buffers"] + (reduction if at_reduction else 0)}


def element_bytes(precision: str, optimizer: str, sixteen_bit: str = "") -> tuple[int, int, int]:
    """(parameter, gradient, optimizer) bytes per parameter held at rest. Only a method whose weights are 16-bit
    under mixed precision (``sixteen_bit="weights"``: DeepSpeed's bf16 mode) holds 2 + 2 bytes, with
    fp32 master weights in the optimizer's share as the ZeRO paper counts them; autocast over fp32 weights and
    FSDP's fp32 shards hold what fp32 training holds."""
    states = _STATES[optimizer]
    if precision == "bf16-true":  # the optimizer's state takes its parameters' dtype (torch.zeros_like)
        return 2, 2, 2 * states
    if precision == "bf16-mixed" and sixteen_bit == "weights":
        return 2, 2, 4 + 4 * states
    return 4, 4, 4 * states


def sixteen_bit(sharding: Sharding, precision: str) -> str:
    """How a method holds its weights under ``precision`` (see ``Sharding.sixteen_bit``): only bf16-mixed changes a
    sharded method's layout; fp16-mixed is autocast over fp32 weights everywhere. DeepSpeed's ZeRO-3 holds bf16
    weights like ZeRO-1/2 also when paratrain partitions the model before the engine exists
    (``deepspeed_init.partition_from_rank0`` casts each module first, as the engine would). Under bf16-true every
    method holds, gathers, computes with and reduces the bf16 weights the model was cast to: mode ``true``."""
    if precision == "bf16-true":
        return "true"
    return sharding.sixteen_bit if precision == "bf16-mixed" else ""


def wire_bytes(sharding: Sharding, precision: str) -> tuple[int, int]:
    """(parameter, gradient) bytes per element sent: 16-bit parameters gathered by the sharded methods that hold or
    gather them under bf16-mixed, gradients reduced in fp32 by every method paratrain runs; bf16-true sends both
    in bf16."""
    mode = sixteen_bit(sharding, precision)
    return (2 if mode in ("weights", "gathered", "true") else 4), reduce_bytes(mode)


def computes_under_autocast(sharding: Sharding, precision: str) -> bool:
    """Whether the forward computes with 16-bit copies autocast makes of fp32 weights (and keeps an fp32 residual
    stream): every method under the mixed precisions but those that hold or gather 16-bit weights."""
    return precision in AUTOCAST and not sixteen_bit(sharding, precision)


# Units' worth of unsharded tensors FSDP2 holds in backward: the unit computing, the next one prefetched, the unit's
# unsharded gradients, and the previous unit's reduce-scatter input, kept until that reduce-scatter is done
# (torch.distributed.fsdp's foreach_reduce). Forward holds two. Measured on a 24 M llama with checkpointing, 2
# ranks: 296–307 MiB against 295 MiB predicted; with two units advise was 8–13 % low.
FSDP_UNITS_HELD = 4
ZERO3_PERSISTENCE = 100_000  # DeepSpeed's stage3_param_persistence_threshold default, in elements
FLAT_ALIGN = 2  # DeepSpeed pads its flat buffer to a multiple of FLAT_ALIGN × N elements


def _chunk_rows(rows: int, ranks: int, rank: int) -> int:
    size = math.ceil(rows / ranks)
    return max(0, min(size, rows - rank * size))


def _sizes(model: ModelSpec) -> list[int]:
    return [math.prod(shape) for shape in model.shapes or ()]


def flat_partition(params: int, ranks: int) -> int:
    """Elements of one rank's partition of DeepSpeed's flat ZeRO-1/2 buffer."""
    return math.ceil(params / (FLAT_ALIGN * ranks)) * FLAT_ALIGN


def flat_overlap(model: ModelSpec, ranks: int, rank: int) -> int:
    """Elements of the tensors overlapping ``rank``'s flat partition: the gradients ZeRO-1/2 hold whole."""
    part = flat_partition(model.params, ranks)
    low, high, start, total = rank * part, (rank + 1) * part, 0, 0
    for size in _sizes(model):
        if start < high and start + size > low:
            total += size
        start += size
    return total


def _elements(model: ModelSpec, ranks: int, rank: int, sharded: bool, layout: str = "chunk") -> tuple[float, int]:
    """(elements this rank holds, tensors it holds a piece of — one flat tensor for DeepSpeed's optimizer)."""
    flat = layout in ("flat", "tensor")
    if not sharded:
        if layout == "flat" and model.shapes is not None:  # the flat buffer, padded
            return float(flat_partition(model.params, ranks) * ranks), 1
        return float(model.params), 1 if flat else len(model.shapes or ())
    if model.shapes is None:
        return model.params / ranks, 1 if flat else 0
    if layout == "flat":
        return float(flat_partition(model.params, ranks)), 1
    if layout == "tensor":
        return float(sum(math.ceil(size / ranks) for size in _sizes(model))), 1
    total = tensors = 0
    for shape in model.shapes:
        rows = _chunk_rows(shape[0], ranks, rank) if shape else (1 if rank == 0 else 0)
        total += rows * math.prod(shape[1:])
        tensors += 1
    return float(total), tensors


def _largest_unit(model: ModelSpec) -> float:
    """Parameters of the largest FSDP unit: one transformer block when the architecture is known."""
    arch = model.transformer
    if arch is None:
        return 0.0
    per_layer = (model.params - arch.vocab * arch.hidden) / max(arch.layers, 1)
    return max(per_layer, arch.vocab * arch.hidden)


def _activation_bytes(model: ModelSpec, plan: Plan, notes: list[str], tp: int = 1,
                      sharding: Sharding | None = None, alongside: int = 0) -> int | None:
    return _activations(model, plan, notes, tp, sharding, alongside)[0]


def _activations(model: ModelSpec, plan: Plan, notes: list[str], tp: int = 1, sharding: Sharding | None = None,
                 alongside: int = 0, grads: tuple[int, int] = (0, 0),
                 units: activations.Units | None = None) -> tuple[int | None, int, int]:
    """(activations, gradients not made yet, FSDP's units held) at the step's peak
    (:func:`activations.activation_peak`)."""
    elem = 4 if plan.precision == "fp32" else 2
    autocast = computes_under_autocast(sharding or Sharding(), plan.precision)
    if model.transformer is not None:
        arch = model.transformer
        if plan.seq_len and plan.seq_len != arch.seq_len:
            arch = type(arch)(**{**arch.__dict__, "seq_len": plan.seq_len})
        return activations.activation_peak(arch, plan.micro_batch, elem, checkpointing=plan.checkpointing,
                                           autocast=autocast, tp=tp, alongside=alongside, grads=grads,
                                           units=units)
    if model.activation_bytes is not None and model.activation_batch:
        scale = plan.micro_batch / model.activation_batch * (elem / 4)
        if plan.checkpointing:
            notes.append("checkpointing not modelled for a non-transformer module")
        return int(model.activation_bytes * scale), 0, 0
    notes.append("activations not counted (no architecture: use a preset, or a factory returning example inputs)")
    return None, 0, 0


def made_in_backward(model: ModelSpec, grads: int, tp: int = 1) -> tuple[int, int]:
    """(one block's, the output layer's) share of a rank's ``grads`` bytes, for a method whose gradients backward
    makes tensor by tensor (``p.grad``, set to None between steps): they are not alive before backward reaches them
    (see :func:`paratrain.advise.activations.activation_peak`). ``tp``: the blocks' matrices split over that many
    ranks. (0, 0) without an architecture: every gradient is then counted as alive throughout."""
    arch = model.transformer
    if arch is None or not model.params or not grads:
        return 0, 0
    attention, mlp = arch.block_matrices()
    matrices = attention + mlp * arch.experts
    norms = arch.norm_elements()
    split = arch.layers * matrices if tp > 1 else 0
    held = model.params - split + split / tp
    per_element = grads / held
    return round((matrices / tp + norms) * per_element), round(arch.vocab * arch.hidden * per_element)


def tensor_parallel_memory(model: ModelSpec, plan: Plan, sharding: Sharding | None = None,
                           rows: int = 1) -> RankMemory:
    """Tensor parallelism over ``plan.ranks``: the split layers' parameters, gradients and optimizer state divided
    evenly (paratrain refuses an uneven split), the rest whole on every rank, every tensor a DTensor with its own
    Adam step count; the activations inside the split divided too, for the micro-batch every rank computes.
    ``rows``: FSDP shards the state further over that many groups (:func:`fsdp_tp_memory`)."""
    p_b, g_b, o_b = element_bytes(plan.precision, plan.optimizer)
    out = RankMemory()
    split = model.split_elements
    if split is None:
        out.notes.append("no tensor-parallel plan known for this model: its state counted whole")
        split = 0
    held = model.params - split + split / plan.ranks
    steps = _step_counts(model, plan)
    out.params, out.grads, out.optimizer = round(held * p_b), round(held * g_b), round(held * o_b) + steps
    tp = plan.ranks if model.split_elements else 1
    out.activations, out.grads_unmade, _ = _activations(model, plan, out.notes, tp, sharding,
                                                     grads=made_in_backward(model, math.ceil(out.grads / rows), tp))
    return out


def _step_counts(model: ModelSpec, plan: Plan) -> int:
    """Adam's step count, one scalar per parameter tensor on every rank that holds a piece of it (a DTensor's too)."""
    return ADAM_STEP_BYTES * len(model.shapes or ()) if plan.optimizer in ("adam", "adamw") else 0


def fsdp_tp_memory(model: ModelSpec, plan: Plan, tp: int, sharding: Sharding | None = None) -> RankMemory:
    """FSDP + TP: tensor parallelism within groups of ``tp`` ranks (:func:`tensor_parallel_memory` at ``tp``), and the
    groups' slices sharded by FSDP across the ``plan.ranks / tp`` groups, each block gathered while it computes
    (FSDP_UNITS_HELD of them, each a tp slice)."""
    rows = max(1, plan.ranks // tp)
    mode = sixteen_bit(sharding, plan.precision) if sharding is not None else ""
    out = tensor_parallel_memory(model, replace(plan, ranks=tp), sharding, rows)
    # Adam's step counts are one scalar per tensor on every rank, however its elements are sharded (the 2×2 mesh
    # held 78 B above advise, half the llama's 39 steps, while they were divided too)
    steps = _step_counts(model, plan)
    out.params, out.grads = (math.ceil(x / rows) for x in (out.params, out.grads))
    out.optimizer = math.ceil((out.optimizer - steps) / rows) + steps
    if rows > 1:
        out.buffers += round(_largest_unit(model) / tp * unit_bytes(mode))
    return out


def unit_bytes(mode: str) -> int:
    """Bytes per element of one FSDP unit that FSDP_UNITS_HELD units' worth of unsharded tensors take: the units'
    parameters and gradients in the dtype the forward computes with (bf16 under FSDP's mixed-precision policy), and
    the reduce-scatter input in the reduction dtype (:func:`reduce_bytes`)."""
    return (FSDP_UNITS_HELD - 1) * compute_bytes(mode) + reduce_bytes(mode)


def pipeline_chunks(stages: int) -> int:
    """Micro-batches per batch under paratrain's pp by default (PipelineOptions.chunks): twice the stages."""
    return 2 * stages


def bubble_fraction(stages: int, chunks: int) -> float:
    """The share of a step each stage idles while the pipe fills and drains: (p−1)/(m+p−1), GPipe's and 1F1B's."""
    return (stages - 1) / (chunks + stages - 1)


def pipeline_memory(model: ModelSpec, plan: Plan, schedule: str) -> RankMemory:
    """Pipeline parallelism over ``plan.ranks`` stages as paratrain cuts a model: contiguous runs of blocks (the first
    stages take one more where they do not divide), the embeddings on the first stage, the final norm and output
    layer on the last. The busier of those two stages. Each batch is cut into :func:`pipeline_chunks` micro-batches;
    GPipe keeps every one's activations until its backward, 1F1B at most one per stage (the first stage holds
    ``min(stages, chunks)``, the last one)."""
    p_b, g_b, o_b = element_bytes(plan.precision, plan.optimizer)
    stages, arch = plan.ranks, model.transformer
    if arch is None:
        out = RankMemory(notes=["pipeline stages not modelled without an architecture: state divided evenly"])
        held = model.params / stages
        out.params, out.grads, out.optimizer = round(held * p_b), round(held * g_b), round(held * o_b)
        out.activations = _activation_bytes(model, plan, out.notes)
        return out
    chunks = pipeline_chunks(stages)
    micro = math.ceil(plan.micro_batch / chunks)
    norms = arch.norm_elements()
    blocks = arch.layers * (sum(arch.block_matrices()) + norms)
    outside = max(0, model.params - blocks)  # embeddings, output layer, the final norm and biases
    embedding = min(outside, arch.vocab * arch.hidden)
    best = RankMemory()
    for stage, layers in ((0, math.ceil(arch.layers / stages)), (stages - 1, arch.layers // stages)):
        last = stage == stages - 1
        held = blocks * layers / arch.layers + (outside - embedding if last else embedding)
        out = RankMemory()
        # Adam's step count per tensor: a block's matrices and norms; the embedding, or the final norm and the head
        tensors = layers * (4 + (3 if arch.mlp == "swiglu" else 2) + (4 if arch.norm == "layernorm" else 2)) + \
            (2 if last else 1)
        steps = ADAM_STEP_BYTES * tensors if plan.optimizer in ("adam", "adamw") else 0
        out.params, out.grads, out.optimizer = round(held * p_b), round(held * g_b), round(held * o_b) + steps
        in_flight = chunks if schedule == "gpipe" else (1 if last else min(stages, chunks))
        part = replace(arch, layers=layers, vocab=arch.vocab if last else 0)  # no logits before the last stage
        # one micro-batch's forward and backward (its recompute under checkpointing), the others in flight holding
        # what their forward kept
        out.activations = _activation_bytes(replace(model, transformer=part), replace(plan, micro_batch=micro),
                                            out.notes, alongside=in_flight - 1)
        out.buffers = 2 * micro * (plan.seq_len or arch.seq_len) * arch.hidden * 4  # fp32: the residual stream
        if out.total >= best.total:
            best = out
    best.notes.append(f"{plan.micro_batch} samples cut into {chunks} micro-batches; pipeline bubble "
                      f"{bubble_fraction(stages, chunks) * 100:.0f} % of each step")
    return best


def rank_memory(model: ModelSpec, sharding: Sharding, plan: Plan, rank: int = 0) -> RankMemory:
    """The bytes rank ``rank`` holds under one method. Rank 0 holds the largest piece of every shard."""
    if sharding.tensor_parallel and sharding.tp_size:
        return fsdp_tp_memory(model, plan, sharding.tp_size, sharding)
    if sharding.tensor_parallel:
        return tensor_parallel_memory(model, plan, sharding)
    if sharding.pipeline:
        return pipeline_memory(model, plan, sharding.pipeline)
    mode = sixteen_bit(sharding, plan.precision)
    p_b, g_b, o_b = element_bytes(plan.precision, plan.optimizer, mode)
    if sharding.master and plan.precision == "fp32":
        o_b += 4
    n, layout = plan.ranks, sharding.layout
    out = RankMemory()
    p_el, _ = _elements(model, n, rank, sharding.params, layout)
    if layout == "tensor" and sharding.params:  # small tensors stay whole on every rank as well
        p_el += sum(size for size in _sizes(model) if size < ZERO3_PERSISTENCE)
    # ZeRO-1/2 at the step: the whole gradients of the tensors overlapping the partition (``grads_in_partition``).
    # ZeRO-1 (no overlap_comm) holds every tensor's p.grad whole until backward ends; its reduction then copies them
    # into the bucket and clears them (stage_1_and_2's independent_gradient_partition_epilogue:
    # _clear_param_grad_only), so the rest is held through backward only: counted as a working buffer.
    through_backward = 0.0
    if layout == "flat" and model.shapes is not None:
        g_el = float(flat_overlap(model, n, rank))
        if not sharding.grads:
            through_backward = model.params - g_el
    else:  # unsharded gradients are per tensor (p.grad), not DeepSpeed's padded flat buffer
        g_el, _ = _elements(model, n, rank, sharding.grads, layout if sharding.grads else "chunk")
    o_el, o_tensors = _elements(model, n, rank, sharding.optimizer, layout)
    steps = ADAM_STEP_BYTES * o_tensors if plan.optimizer in ("adam", "adamw") else 0
    out.params, out.grads, out.optimizer = round(p_el * p_b), round(g_el * g_b), round(o_el * o_b) + steps
    out.buffers += round(through_backward * g_b)
    for part in sharding.offload:
        moved = getattr(out, part)
        out.host += moved
        setattr(out, part, 0)
    # ZeRO's optimizers keep their own gradient partitions (``master``); an offloaded gradient is not on the device.
    # ZeRO-1 is the exception: backward makes every p.grad whole, tensor by tensor, as under DDP, and its reduction
    # only starts when backward ends; what is not made yet at the peak is taken from the partition's gradients and
    # the rest in their proportion (ZeRO-1 fp32 was 8-13 % high on the bundled llama without it).
    per_tensor = not sharding.master and "grads" not in sharding.offload
    made_whole = round(through_backward * g_b) + out.grads if through_backward else 0
    backward_makes = out.grads if per_tensor else made_whole
    units = transients.fsdp_units(model, sharding.gathered, mode, p_b, out.params, plan.backend) \
        if n > 1 and not sharding.offload else None
    out.activations, unmade, held = _activations(model, plan, out.notes, sharding=sharding,
                                                 grads=made_in_backward(model, backward_makes), units=units)
    out.buffers += held
    if backward_makes and unmade:
        out.grads_unmade = round(unmade * out.grads / backward_makes)
        out.buffers -= unmade - out.grads_unmade
    if units is None:  # FSDP's units are counted moment by moment above, where its blocks are known
        if sharding.gathered == "all" and mode == "gathered":  # a bf16 copy of every parameter, beside the fp32 shards
            out.buffers += round(model.params * 2)
        elif sharding.gathered == "all":
            out.buffers += round(model.params * p_b) - (out.params if "params" not in sharding.offload else 0)
        elif sharding.gathered == "reused":  # gathered into buffers of their own, beside the partition, on one rank too
            kept = min(model.params, ZERO3_MAX_REUSE_DISTANCE // 2)
            out.buffers += round(max(kept, 2 * _largest_unit(model)) * p_b)
        elif sharding.gathered == "unit" and n > 1:  # see FSDP_UNITS_HELD
            unit = _largest_unit(model)
            out.buffers += round(unit * unit_bytes(mode))
            if not unit:
                out.notes.append("FSDP's gathered unit not counted (architecture unknown)")
        if sharding.gathered == "all" and n > 1:  # FSDP reduces each unit as backward leaves it, as under
            # "unit": the unit's unsharded gradients (compute dtype), the previous unit's reduce-scatter input (fp32)
            out.buffers += round(_largest_unit(model) * (compute_bytes(mode) + reduce_bytes(mode)))
    if sharding.buckets:  # DDP builds its reducer, buckets included, at one process too (ddp×1: +1.1 MiB)
        out.buffers += out.grads
    if sharding.reduce_bucket:  # allocated on one rank too: the ZeRO optimizer buckets whatever the world size
        # ZeRO-1/2 stage their bucket in the gradients' dtype; ZeRO-3's buckets are keyed by the communication dtype
        # (stage3's ipg_buckets), fp32 as paratrain configures it
        bucket_b = wire_bytes(sharding, plan.precision)[1] if layout == "tensor" else g_b
        bucket = min(ZERO_REDUCE_BUCKET, model.params)
        out.buffers += round(bucket * bucket_b)
        reused = min(bucket, ZERO3_MAX_REUSE_DISTANCE // 2) * p_b if layout == "tensor" else 0
        out.reduction = transients.zero_reduction(layout, plan.backend, bucket, g_b, round(through_backward * g_b),
                                                  reused)
    if sharding.fusion_buffer and n > 1:
        out.buffers += HOROVOD_FUSION_BYTES
    if sharding.gathers_outputs and n > 1 and out.activations is not None and model.transformer is not None:
        arch = model.transformer
        out.activations += (n - 1) * plan.micro_batch * (plan.seq_len or arch.seq_len) * arch.vocab * 4
    return out
