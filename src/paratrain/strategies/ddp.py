"""DistributedDataParallel: one process per device, gradients all-reduced (averaged) during backward."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from paratrain.strategies import _procgroup
from paratrain.strategies.base import Availability, BackwardSyncControl, Method, Strategy


class DDPStrategy(Strategy, BackwardSyncControl):
    method = Method.DDP
    builds = "ddp"  # a DistributedDataParallel, the Session's or the script's own

    def __init__(self, options, env) -> None:
        super().__init__(options, env)
        self._no_sync: contextlib.AbstractContextManager | None = None

    @classmethod
    def available(cls) -> Availability:
        if not dist.is_available():
            return Availability(False, "this torch build has no torch.distributed", "pip install torch")
        if torch.cuda.is_available() and dist.is_nccl_available():
            return Availability.yes("nccl on GPU")
        if dist.is_gloo_available():
            return Availability.yes("gloo on CPU")
        return Availability(False, "neither nccl nor gloo is built into torch", "pip install torch")

    def setup(self) -> None:
        self.device = _procgroup.join(self.env, str(self.method))

    def wrap(self, model, optimizer):
        assert self.device is not None  # set by setup()
        model = model.to(self.device)
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids), optimizer

    def unwrap(self, model):
        return model.module if isinstance(model, DistributedDataParallel) else model

    def unseen_cpu_bytes(self, model) -> int:
        """DDP's reducer keeps its gradient buckets in C++: a second copy of the gradients, unless the gradients are
        views of them. Their sizes are DDP's own report (the logging data it records for every job)."""
        if not isinstance(model, DistributedDataParallel) or self.device is None or self.device.type != "cpu":
            return 0
        data = model._get_ddp_logging_data()
        if data.get("gradient_as_bucket_view"):
            return 0
        return sum(int(size) for size in str(data.get("bucket_sizes", "")).split(",") if size.strip())

    def set_grad_sync(self, model, enabled: bool) -> None:
        # DDP decides in forward() whether the coming backward all-reduces, so this is called before forward.
        if not enabled and self._no_sync is None:
            self._no_sync = model.no_sync()
            self._no_sync.__enter__()
        elif enabled and self._no_sync is not None:
            self._no_sync.__exit__(None, None, None)
            self._no_sync = None

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)
