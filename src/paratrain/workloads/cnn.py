"""``cnn``: a small convolutional net with BatchNorm and dropout on the 8×8 digits.

Why it is bundled: it is the kind of model people train, and the kind on which "every method matches one process to
1e-5" stops being true — convolutions reorder float sums when the batch is split, dropout draws masks per rank and
BatchNorm normalises per rank (SyncBatchNorm needs GPUs). `paratrain compare --full` runs it so the report shows the
equivalence verdicts (exact / within noise / not equivalent) on a real model.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
from torch import nn

from paratrain.errors import ConfigError
from paratrain.workloads.base import Built, Init, Workload
from paratrain.workloads.mlp import accuracy, correct, digits_split


def build(width: int = 16, depth: int | None = None, seed: int = 0, init: Init = nullcontext) -> Built:
    """``width`` is the first convolution's channels (the second has twice as many); the depth is fixed."""
    if depth is not None:
        raise ConfigError("the cnn workload has a fixed depth", hint="use --workload gpt to vary --depth")
    c = width
    train, test = digits_split()
    torch.manual_seed(seed)
    with init():
        model = nn.Sequential(
            nn.Unflatten(1, (1, 8, 8)),
            nn.Conv2d(1, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Dropout(0.1), nn.Linear(2 * c * 16, 10),
        )
    return Built(model, train, test, nn.CrossEntropyLoss(), correct, accuracy)


WORKLOAD = Workload("cnn", "conv net with BatchNorm and dropout on the 8×8 digits set", build,
                    global_batch=128, steps=120, lr=1e-3)
