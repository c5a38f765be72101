"""The workload protocol and registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from paratrain.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class Built:
    """A workload's model and data. Evaluation is split in two so every rank can evaluate its exactly-once share of
    ``test`` (``session.prepare_eval``): ``score(outputs, targets)`` gives sums over one batch (correct predictions,
    summed negative log-likelihood, sample counts), summed over batches and ranks; ``finish(sums)`` turns the
    totals into the reported metrics (accuracy, perplexity)."""

    model: torch.nn.Module
    train: torch.utils.data.Dataset
    test: torch.utils.data.Dataset
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    score: Callable[[torch.Tensor, torch.Tensor], dict[str, float]]
    finish: Callable[[dict[str, float]], dict[str, float]]


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    build: Callable[..., Built]
    global_batch: int
    steps: int
    lr: float
    tokens_per_sample: int | None = None  # for tokens/s; None when samples are not token sequences
    # SGD with this momentum instead of AdamW. The mlp uses it because its Keras twin must train identically:
    # Keras' Adam adds epsilon to sqrt(v) before bias correction and torch's after, which alone moves the curves
    # apart by 7e-4 in 60 steps; torch's and Keras' momentum SGD are the same arithmetic.
    momentum: float | None = None
    options: dict[str, Any] | None = None


def _registry() -> dict[str, Workload]:
    from paratrain.workloads import cnn, gpt, mlp

    return {w.name: w for w in (mlp.WORKLOAD, cnn.WORKLOAD, gpt.WORKLOAD)}


WORKLOADS = ("mlp", "cnn", "gpt")


def get(name: str) -> Workload:
    found = _registry().get(name)
    if found is None:
        known = ", ".join(WORKLOADS)
        raise ConfigError(f'unknown workload "{name}" (bundled: {known}).{did_you_mean(name, WORKLOADS)}',
                          hint="or measure your own script with --script train.py")
    return found
