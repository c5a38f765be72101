"""A training method written the way a plug-in would add one: one file, its Strategy and its registry line,
touching no paratrain source file. Loaded by ``PARATRAIN_PLUGINS=tests.helpers.toy_method``.

"toy" is data parallelism by hand: every rank starts from rank 0's weights and, before each optimizer step, the
gradients are averaged with ``torch.distributed.all_reduce`` — what DDP does, without its buckets or overlap, so it
must train the same numbers as ddp.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from paratrain.strategies import _procgroup, registry
from paratrain.strategies.base import Availability, Strategy
from paratrain.strategies.costs import CostModel, Sharding


class ToyStrategy(Strategy):
    method = "toy"  # type: ignore[assignment]

    @classmethod
    def available(cls) -> Availability:
        return Availability.yes("gloo on CPU") if dist.is_gloo_available() else Availability(False, "no gloo", "")

    def setup(self) -> None:
        self.device = _procgroup.join(self.env, "toy")

    def wrap(self, model, optimizer):
        model = model.to(self.device)
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)
        return model, optimizer

    _synced = False

    def sync_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Called by the Session before it clips; step() does it otherwise."""
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    dist.all_reduce(param.grad)  # gloo has no AVG: sum, then divide
                    param.grad.div_(self.world_size)
        self._synced = True

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self._synced:
            self.sync_gradients(optimizer)
        optimizer.step()
        self._synced = False

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)


registry.register(registry.MethodInfo(
    "toy", "torch", ("torchrun",), "a test's hand-made data parallelism", f"{__name__}:ToyStrategy", True,
    costs=(CostModel("toy", Sharding(), "allreduce", "a full replica per rank, gradients averaged after backward",
                     20),)))
