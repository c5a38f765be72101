"""``mlp``: an MLP on scikit-learn's handwritten digits. Small enough for two CPU cores, real enough to learn."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset

from paratrain.errors import ConfigError
from paratrain.workloads.base import Built, Init, Workload

TEST_SAMPLES = 297  # 1,797 images: 1,500 to train on, the rest to measure accuracy


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    rows = _digits_rows()
    x = torch.tensor([row[:-1] for row in rows], dtype=torch.float32) / 16.0
    y = torch.tensor([int(row[-1]) for row in rows], dtype=torch.long)
    return x, y


def _digits_rows() -> list[list[float]]:
    """The 1,797 rows (64 pixels, then the label) of the CSV file scikit-learn ships, read straight from its package
    folder: importing sklearn.datasets (and SciPy with it) costs every training process about a second, which is
    most of a small cell's start-up. ``load_digits`` reads the same file; it is the fallback if the file moves."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise ConfigError("the mlp workload needs scikit-learn (it ships the digits data set)",
                          hint='pip install "paratrain[compare]"')
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as f:
                return [[float(v) for v in line.split(",")] for line in f if line.strip()]
    from sklearn.datasets import load_digits

    data = load_digits()
    return [[*map(float, pixels), float(label)] for pixels, label in zip(data.data, data.target, strict=True)]


def digits_split() -> tuple[TensorDataset, TensorDataset]:
    """(train, test): the same 1,500 / 297 split for every workload built on the digits."""
    x, y = _digits()
    gen = torch.Generator().manual_seed(1234)
    order = torch.randperm(len(x), generator=gen)
    test, train = order[:TEST_SAMPLES], order[TEST_SAMPLES:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def correct(logits: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    return {"correct": float((logits.argmax(dim=1) == target).sum()), "count": float(len(target))}


def accuracy(sums: dict[str, float]) -> dict[str, float]:
    return {"accuracy": sums["correct"] / sums["count"] if sums.get("count") else float("nan")}


def build(width: int = 512, depth: int | None = None, seed: int = 0, init: Init = nullcontext) -> Built:
    """``width`` is the hidden size; ``depth`` does not apply (two hidden layers) and is refused."""
    if depth is not None:
        raise ConfigError("the mlp workload has a fixed depth", hint="use --workload gpt to vary --depth")
    hidden = width
    train, test = digits_split()
    torch.manual_seed(seed)
    with init():
        model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                              nn.Linear(hidden, 10))
    return Built(model, train, test, nn.CrossEntropyLoss(), correct, accuracy)


WORKLOAD = Workload("mlp", "MLP classifier on the 8×8 digits set (1,797 images)", build,
                    global_batch=128, steps=120, lr=0.05, momentum=0.9)
