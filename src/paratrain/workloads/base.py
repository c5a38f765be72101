"""What a bundled workload is: its model and data (:class:`Built`) and its settings (:class:`Workload`).

Why the names live elsewhere (registry.py): every workload module imports this one, so this one must not import
them back.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# What a workload builds its model inside (and nothing else: its data stays real): train.py passes
# session.init_module, so that under fsdp and deepspeed:zero3 only rank 0 ever holds the whole model.
Init = Callable[[], AbstractContextManager[Any]]


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
    splittable: bool = False  # its model declares a tensor-parallel plan: compare runs tp on it by default

    @property
    def slug(self) -> str:
        """The name in run ids and folder names: a Hugging Face config's is ``hf-<its folder>``, not its path."""
        if self.name.startswith("hf:"):
            return "hf-" + (Path(self.name[3:]).parent.name or "config")
        return self.name
