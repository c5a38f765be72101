"""One process, one device: the reference every other method must reproduce."""

from __future__ import annotations

import torch

from paratrain.errors import LaunchError
from paratrain.strategies.base import Availability, Method, Strategy


def default_device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


class SingleStrategy(Strategy):
    method = Method.SINGLE

    @classmethod
    def available(cls) -> Availability:
        return Availability.yes("always")

    def setup(self) -> None:
        if self.env.world_size > 1:
            raise LaunchError(
                f"strategy {self.method} runs one process, but this one was launched as rank {self.env.rank} "
                f"of {self.env.world_size}",
                hint="use --strategy ddp (or fsdp) for several processes, or --nproc 1",
            )
        self.device = default_device()
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def wrap(self, model, optimizer):
        return model.to(self.device), optimizer
