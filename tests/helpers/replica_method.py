"""A plug-in method whose ranks are not data-parallel: every rank trains the whole model on the whole batch, alone.
Loaded by ``PARATRAIN_PLUGINS=tests.helpers.replica_method``.

It is what tensor and pipeline parallelism look like to the data: the ranks that hold parts of one replica must
read the same batch, and a metric summed over ranks must count that replica once. Here each rank is its own
replica group (data-parallel size 1), so the Session's loader, all_reduce, gather and evaluation split must act as
in one process on every rank — and train one process's curve without any gradient communication.
"""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from paratrain.strategies import _procgroup, registry
from paratrain.strategies.base import Availability, Strategy
from paratrain.strategies.costs import CostModel, Sharding


class ReplicaStrategy(Strategy):
    method = "replica"  # type: ignore[assignment]
    _group: Any = None

    @classmethod
    def available(cls) -> Availability:
        return Availability.yes("gloo on CPU") if dist.is_gloo_available() else Availability(False, "no gloo", "")

    def setup(self) -> None:
        self.device = _procgroup.join(self.env, "replica")
        self._group, _ = dist.new_subgroups(group_size=1)  # every rank calls it: one group per rank

    @property
    def data_parallel_rank(self) -> int:
        return 0

    @property
    def data_parallel_size(self) -> int:
        return 1

    @property
    def data_parallel_group(self) -> Any:
        return self._group

    def wrap(self, model, optimizer):
        model = model.to(self.device)
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)  # the same start on every rank, as a split model's parts would have
        return model, optimizer

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)


registry.register(registry.MethodInfo(
    "replica", "torch", ("torchrun",), "a test's replicas that each read the whole batch",
    f"{__name__}:ReplicaStrategy", True,
    costs=(CostModel("replica", Sharding(), "none", "a full replica per rank, no gradient communication", 20),)))
