"""Factories for `paratrain advise --model package.module:factory` tests."""

from __future__ import annotations

import torch
from torch import nn


def wide_mlp() -> tuple[nn.Module, torch.Tensor]:
    """Built on whatever device the caller makes default (advise: meta), with an example batch of 8."""
    model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096))
    return model, torch.zeros(8, 4096)


def not_a_module() -> int:
    return 3
