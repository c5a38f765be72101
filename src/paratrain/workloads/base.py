"""The workload protocol and registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from paratrain.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class Built:
    model: torch.nn.Module
    train: torch.utils.data.Dataset
    test: torch.utils.data.Dataset
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    evaluate: Callable[[torch.nn.Module, torch.utils.data.Dataset, torch.device], dict[str, float]]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[..., Built]
    global_batch: int
    steps: int
    lr: float
    tokens_per_sample: int | None = None  # for tokens/s; None when samples are not token sequences
    options: dict[str, Any] | None = None


def _registry() -> dict[str, Workload]:
    from paratrain.workloads import gpt, mlp

    return {w.name: w for w in (mlp.WORKLOAD, gpt.WORKLOAD)}


WORKLOADS = ("mlp", "gpt")


def get(name: str) -> Workload:
    found = _registry().get(name)
    if found is None:
        known = ", ".join(WORKLOADS)
        raise ConfigError(f'unknown workload "{name}" (bundled: {known}).{did_you_mean(name, WORKLOADS)}',
                          hint="or measure your own script with --script train.py")
    return found
