"""What a method costs, declared with the method: how it lays training state out and what it sends each step.

``paratrain advise`` computes memory and communication from these facts (:mod:`paratrain.advise.memory`,
:mod:`paratrain.advise.comm`); they sit in each method's registry entry, next to its launcher and framework, so that
a new method brings its own cost model instead of being added to a second table. Plain data: importing it costs
nothing and needs no backend.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sharding:
    """How one method lays model state out. ``params``/``grads``/``optimizer``: divided across ranks at rest.
    ``gathered``: unsharded parameters held while computing — ``"unit"`` (FSDP's unit computing, the next one
    prefetched and, in backward, their gradients: advise.memory.FSDP_UNITS_HELD), ``"all"`` (every parameter from
    forward to backward), ``"reused"`` (ZeRO-3: the parameters used again within ZERO3_MAX_REUSE_DISTANCE, and at
    least the unit computing), or ``""``. ``offload``: state kept in host memory."""

    params: bool = False
    grads: bool = False
    optimizer: bool = False
    gathered: str = ""
    offload: tuple[str, ...] = ()
    buckets: bool = False  # DDP's flat gradient buckets: a second copy of the gradients
    fusion_buffer: bool = False  # Horovod's tensor-fusion buffer
    gathers_outputs: bool = False  # DataParallel: every replica's output lands on GPU 0
    layout: str = "chunk"  # how shards are cut: "chunk", "flat" or "tensor" (see paratrain.advise.memory)
    master: bool = False  # an fp32 master copy of the partition even in fp32 training (DeepSpeed's ZeRO optimizers)
    reduce_bucket: bool = False  # ZeRO's gradient-reduction bucket, allocated whole (ZERO_REDUCE_BUCKET at most)
    # Tensor parallel: the blocks' matrices (and the biases of those split by their outputs) divided across ranks,
    # everything else whole on each, and the activations inside the split divided too; every rank reads the whole
    # batch (the ranks are one replica)
    tensor_parallel: bool = False
    # Pipeline parallel ("1f1b" or "gpipe": the schedule): consecutive blocks on each rank, the embeddings on the
    # first and the output layer on the last; a batch streamed through in micro-batches (advise.memory.pipeline_memory)
    pipeline: str = ""
    # FSDP + TP: tensor parallel within groups of this many ranks (one replica each), and params/grads/optimizer
    # sharded by FSDP across the groups; 0: tensor parallel over every rank
    tp_size: int = 0
    # Under bf16-mixed: "" autocast over fp32 weights (the replicated methods: state as in fp32, 16-bit copies made as
    # each matrix multiply runs); "gathered" fp32 shards with bf16 parameters gathered and computed with, gradients
    # reduced in fp32 (FSDP2's MixedPrecisionPolicy); "weights" bf16 parameters and gradients with fp32 master
    # weights in the optimizer's partition (DeepSpeed's bf16 mode, the ZeRO paper's 2 + 2 + 12 bytes)
    sixteen_bit: str = ""

    def replicas(self, ranks: int) -> int:
        """How many copies of the model read different batches: one under tensor or pipeline parallelism (every rank
        computes the whole batch), one per group under FSDP + TP, every rank otherwise."""
        if self.tensor_parallel and self.tp_size:
            return max(1, ranks // self.tp_size)
        return 1 if self.tensor_parallel or self.pipeline else ranks


# DeepSpeed's reduce_bucket_size default, in elements. paratrain's DeepSpeed config lowers it to the model's size
# (deepspeed_config.size_buckets), so a ZeRO rank holds min(this, Ψ) gradient elements more than its state.
ZERO_REDUCE_BUCKET = 500_000_000
# DeepSpeed's stage3_max_reuse_distance default, in elements: ZeRO-3 does not free a gathered parameter that is used
# again within this many elements. Forward's use of a block and backward's are 2 × (the parameters after it) apart,
# so from forward to backward it keeps the last half of this many — every parameter of a model up to 5e8 (a 24 M
# parameter llama: its whole 90 MiB, measured between forward and backward on each of 2 ranks).
ZERO3_MAX_REUSE_DISTANCE = 1_000_000_000


@dataclass(frozen=True)
class CostModel:
    """One configuration of a method as advise ranks it (a method may have several: DeepSpeed's ZeRO stages).

    ``spec`` is the canonical spec ``paratrain run`` takes; ``comm`` a pattern of :func:`paratrain.advise.comm.
    step_bytes` (``allreduce``, ``shard_grads``, ``shard_all``, ``dp``, ``tp``, ``none``); ``what`` one phrase for the
    reasons; ``preference`` breaks ties between methods that cost the same — lower first: fewer moving parts and
    fewer extra packages, so a tie goes to plain DDP rather than to a sharded engine doing the same work."""

    spec: str
    sharding: Sharding
    comm: str
    what: str
    preference: int
    one_node: bool = False  # its ranks must share a machine (tensor parallel's per-block all-reduces)
