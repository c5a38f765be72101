"""The methods `advise` compares: each as the spec ``paratrain run`` takes, how it lays out state, what it sends.

Read from the registry (each method declares its cost models beside its launcher: :mod:`paratrain.strategies.costs`),
so a new method is ranked without a line here. Listed in order of preference between methods that cost the same:
the one with fewer moving parts (and fewer extra packages) first, so a tie goes to plain DDP rather than to a
sharded engine doing the same work.
"""

from __future__ import annotations

from dataclasses import dataclass

from paratrain.strategies import registry
from paratrain.strategies.costs import Sharding


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
        if s.tensor_parallel and s.tp_size:
            return "—", f"the blocks' matrices over groups of {s.tp_size}, then everything across the groups"
        if s.tensor_parallel:
            return "embeddings, norms, output layer", "the blocks' matrices (params, grads, optimizer)"
        if s.pipeline:
            return "—", "consecutive blocks per rank (params, grads, optimizer, activations)"
        parts = {"params": s.params, "grads": s.grads, "optimizer": s.optimizer}
        sharded = [k for k, v in parts.items() if v]
        replicated = [k for k, v in parts.items() if not v]
        if s.offload:
            sharded = [f"{k} (host)" if k in s.offload else k for k in sharded]
        return ", ".join(replicated) or "—", ", ".join(sharded) or "—"

    def short_layout(self) -> str:
        """What is sharded, in letters for a narrow table: ``p+g+o``, ``g+o``."""
        s = self.sharding
        if s.tensor_parallel and s.tp_size:
            return "blocks+p+g+o"
        if s.tensor_parallel:
            return "blocks"
        if s.pipeline:
            return "stages"
        letters = "+".join(k[0] for k, v in (("params", s.params), ("grads", s.grads),
                                             ("optimizer", s.optimizer)) if v) or "—"
        return letters


def _from_registry() -> tuple[MethodModel, ...]:
    ranked = []
    for entry in registry.entries():
        for cost in entry.costs:
            ranked.append((cost.preference, MethodModel(
                cost.spec, entry.framework, entry.launcher, cost.sharding, cost.comm,
                one_process=not entry.multi_process, multi_node=entry.multi_process and not cost.one_node,
                what=cost.what)))
    return tuple(model for _, model in sorted(ranked, key=lambda pair: pair[0]))


def all_methods() -> tuple[MethodModel, ...]:
    """Every method configuration advise ranks, in order of preference (read when asked: a method registered by a
    plug-in is ranked too)."""
    return _from_registry()
FRAMEWORKS = ("torch", "tensorflow")


def get(spec: str) -> MethodModel:
    return next(m for m in all_methods() if m.spec == spec)
