"""torch.nn.DataParallel: the seed's first method. One process splits each batch over all local GPUs.

On a machine with fewer than two GPUs DataParallel has nothing to split over; we say so once and run as a single
process rather than pretend.
"""

from __future__ import annotations

import torch

from paratrain.console import notice
from paratrain.strategies.base import Availability, Method
from paratrain.strategies.single import SingleStrategy


class DataParallelStrategy(SingleStrategy):
    method = Method.DP
    compilable = False  # DataParallel replicates the module every step, which torch.compile cannot follow

    @classmethod
    def available(cls) -> Availability:
        # device_count() asks NVML; is_available() would initialise CUDA in the launcher, which then forks this
        # one-process method's worker: "Cannot re-initialize CUDA in forked subprocess" (seen on an H200).
        n = torch.cuda.device_count()
        if n >= 2:
            return Availability.yes(f"{n} GPUs")
        return Availability.yes(f"{n} GPU(s): runs as a single process (nothing to split over)")

    def wrap(self, model, optimizer):
        assert self.device is not None  # set by setup()
        model = model.to(self.device)
        n = torch.cuda.device_count() if self.device.type == "cuda" else 0
        if n < 2:
            where = "no GPU" if n == 0 else "one GPU"
            notice(f"dp: {where} here, so DataParallel runs as one plain process (no parallelism)")
            return model, optimizer
        return torch.nn.DataParallel(model), optimizer

    def unwrap(self, model):
        return model.module if isinstance(model, torch.nn.DataParallel) else model
