"""What the two TensorFlow methods share: availability without importing TensorFlow, and a clear answer when a
PyTorch ``Session`` is started under them. Their training goes through :mod:`paratrain.tf`, not the Session."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from typing import Any

from paratrain.errors import ConfigError
from paratrain.strategies.base import Availability, Strategy

TF_FIX = 'pip install "paratrain[tf]"'
TF_KERAS_FIX = 'pip install --no-deps "tf_keras=={minor}.*"'


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_version() -> str | None:
    """The installed TensorFlow (any of its distributions), without importing it (an import takes seconds)."""
    if importlib.util.find_spec("tensorflow") is None:
        return None
    return next((v for d in ("tensorflow", "tensorflow-cpu", "tf-nightly") if (v := version(d))), "unknown")


def tf_keras_fix() -> str:
    tf = tensorflow_version() or "2.21"
    return TF_KERAS_FIX.format(minor=".".join(tf.split(".")[:2]))


class TensorFlowStrategy(Strategy):
    """Base of mirrored and multiworker: they are launched by paratrain but trained by Keras."""

    @classmethod
    def available(cls) -> Availability:
        found = tensorflow_version()
        if found is None:
            return Availability(False, "TensorFlow is not installed", TF_FIX)
        return Availability.yes(f"TensorFlow {found}")

    def setup(self) -> None:
        raise ConfigError(f"{self.method} is a TensorFlow method: a PyTorch Session cannot train under it",
                          hint="in a Keras script use `from paratrain import tf as ptf; strategy = ptf.strategy()`")

    def wrap(self, model: Any, optimizer: Any) -> Any:  # pragma: no cover - setup() refuses first
        self.setup()
