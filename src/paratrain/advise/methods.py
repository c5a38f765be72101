"""The methods `advise` compares: each as the spec ``paratrain run`` takes, how it lays out state, what it sends.

Listed in order of preference between methods that cost the same: the one with fewer moving parts (and fewer
extra packages) first, so a tie goes to plain DDP rather than to a sharded engine doing the same work.
"""

from __future__ import annotations

from dataclasses import dataclass

from paratrain.advise.memory import Sharding
from paratrain.strategies import registry


@dataclass(frozen=True)
class MethodModel:
    spec: str
    framework: str
    launcher: str
    sharding: Sharding
    comm: str  # a pattern of comm.step_bytes
    one_process: bool = False  # one process drives every local device (DataParallel, MirroredStrategy)
    multi_node: bool = True
    what: str = ""  # one phrase for the reasons

    @property
    def method(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def runnable(self) -> bool:
        """Whether this version of paratrain can run it (`paratrain strategies`)."""
        return registry.info(self.method).implemented

    @property
    def label(self) -> str:
        """The spec, shortened to fit an 80-column table (the legend under it spells the short forms out)."""
        short = self.spec.replace("deepspeed:", "ds:").replace("fsdp:shard=", "fsdp:")
        short = short.replace(",offload=optimizer", "+off(o)").replace(",offload=all", "+off(all)")
        return short + (" (tf)" if self.framework == "tensorflow" else "")

    def layout(self) -> tuple[str, str]:
        """(replicated, sharded) in words, for the table."""
        s = self.sharding
        parts = {"params": s.params, "grads": s.grads, "optimizer": s.optimizer}
        sharded = [k for k, v in parts.items() if v]
        replicated = [k for k, v in parts.items() if not v]
        if s.offload:
            sharded = [f"{k} (host)" if k in s.offload else k for k in sharded]
        return ", ".join(replicated) or "—", ", ".join(sharded) or "—"

    def short_layout(self) -> str:
        """What is sharded, in letters for a narrow table: ``p+g+o``, ``g+o``."""
        s = self.sharding
        letters = "+".join(k[0] for k, v in (("params", s.params), ("grads", s.grads),
                                             ("optimizer", s.optimizer)) if v) or "—"
        return letters


ALL = Sharding(params=True, grads=True, optimizer=True)
ZERO12 = {"layout": "flat", "master": True}  # DeepSpeed's layouts: see advise/memory.py
ZERO3 = {"layout": "tensor", "master": True}
METHODS: tuple[MethodModel, ...] = (
    MethodModel("ddp", "torch", "torchrun", Sharding(buckets=True), "allreduce",
                what="a full replica per GPU, gradients all-reduced while backward runs"),
    MethodModel("fsdp:shard=grad_op", "torch", "torchrun", Sharding(params=True, grads=True, optimizer=True,
                                                                     gathered="all"), "shard_grads",
                what="state sharded at rest, parameters gathered once per step (ZeRO-2-like)"),
    MethodModel("deepspeed:zero1", "torch", "torchrun", Sharding(optimizer=True, **ZERO12), "shard_grads",
                what="optimizer state sharded"),
    MethodModel("deepspeed:zero2", "torch", "torchrun", Sharding(grads=True, optimizer=True, **ZERO12),
                "shard_grads",
                what="gradients and optimizer state sharded"),
    MethodModel("horovod", "torch", "horovodrun", Sharding(fusion_buffer=True), "allreduce",
                what="a full replica per GPU, Horovod's ring all-reduce"),
    MethodModel("deepspeed:zero0", "torch", "torchrun", Sharding(), "allreduce",
                what="DeepSpeed's engine with nothing sharded"),
    MethodModel("fsdp:shard=none", "torch", "torchrun", Sharding(), "allreduce",
                what="FSDP replicating everything (DDP through FSDP)"),
    MethodModel("fsdp", "torch", "torchrun", Sharding(params=True, grads=True, optimizer=True, gathered="unit"),
                "shard_all", what="everything sharded, one block gathered at a time (ZeRO-3-like)"),
    MethodModel("deepspeed:zero3", "torch", "torchrun", Sharding(params=True, grads=True, optimizer=True,
                                                                  gathered="unit", **ZERO3), "shard_all",
                what="everything sharded (ZeRO-3)"),
    MethodModel("deepspeed:zero2,offload=optimizer", "torch", "torchrun",
                Sharding(grads=True, optimizer=True, offload=("optimizer",), **ZERO12), "shard_grads",
                what="ZeRO-2 with the optimizer state and its step in host memory"),
    MethodModel("deepspeed:zero3,offload=all", "torch", "torchrun",
                Sharding(params=True, grads=True, optimizer=True, gathered="unit",
                         offload=("params", "grads", "optimizer"), **ZERO3), "shard_all",
                what="ZeRO-3 with all state in host memory"),
    MethodModel("dp", "torch", "python", Sharding(gathers_outputs=True), "dp", one_process=True, multi_node=False,
                what="one process copying the model to every GPU each step"),
    MethodModel("single", "torch", "python", Sharding(), "none", one_process=True, multi_node=False,
                what="one device"),
    MethodModel("multiworker", "tensorflow", "TF_CONFIG", Sharding(), "allreduce",
                what="Keras replicas across processes, gradients all-reduced"),
    MethodModel("mirrored", "tensorflow", "python", Sharding(), "allreduce", one_process=True, multi_node=False,
                what="Keras replicas on the GPUs of one process"),
)
FRAMEWORKS = ("torch", "tensorflow")


def get(spec: str) -> MethodModel:
    return next(m for m in METHODS if m.spec == spec)
