"""Shared pieces of the TensorFlow tests: the Keras model of scripts/keras_equiv.py, run plainly or under a method."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.helpers.launch import ROOT, check, paratrain, python, worker_env

KERAS_EQUIV = str(ROOT / "tests" / "helpers" / "scripts" / "keras_equiv.py")
TOL = 1e-5


def tf_env(**extra: str) -> dict[str, str]:
    return worker_env(TF_CPP_MIN_LOG_LEVEL="2", **extra)


def plain(out: Path, *args: str) -> Path:
    """The model trained by one process without any strategy (TensorFlow's default)."""
    check(python(KERAS_EQUIV, str(out), *args, env=tf_env()))
    return out


def under(strategy: str, nproc: int, out: Path, *args: str, flags: tuple[str, ...] = (), timeout: float = 240,
          env: dict[str, str] | None = None):
    return paratrain("run", "-s", strategy, "-n", str(nproc), *flags, KERAS_EQUIV, str(out), *args,
                     timeout=timeout, env=env or tf_env())


def weights(folder: Path) -> list[np.ndarray]:
    with np.load(folder / "weights.npz") as data:
        return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]


def diffs(a: Path, b: Path) -> tuple[float, float]:
    """(max |Δ per-epoch loss|, max |Δ weight|) between two runs' outputs."""
    la = json.loads((a / "losses.json").read_text())["losses"]
    lb = json.loads((b / "losses.json").read_text())["losses"]
    assert len(la) == len(lb), (la, lb)
    loss = max(abs(x - y) for x, y in zip(la, lb, strict=True))
    return loss, weight_diff(a, b)


def weight_diff(a: Path, b: Path) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(weights(a), weights(b), strict=True))


def replicas(folder: Path) -> int:
    return json.loads((folder / "losses.json").read_text())["replicas"]


__all__ = ["KERAS_EQUIV", "TOL", "diffs", "plain", "replicas", "tf_env", "under", "weight_diff", "weights"]
