"""What the TensorFlow methods share: availability without importing TensorFlow, and the Keras runtime protocol
their training goes through (:mod:`paratrain.tf`, not the Session)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from abc import abstractmethod
from typing import Any

from paratrain.strategies.base import Availability, MethodSpec

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


class KerasMethod(MethodSpec):
    """A TensorFlow method: launched by paratrain, trained by Keras through :mod:`paratrain.tf` — the Keras runtime
    beside the PyTorch one (:class:`Strategy`), not a Strategy whose hooks refuse.

    Two hooks, both run in the worker: :meth:`prepare_tensorflow` right after the script's ``import tensorflow``
    (before its runtime starts, the only moment devices can still be configured; also for a native script that
    builds its own strategy), and :meth:`build`, the ``tf.distribute`` strategy ``ptf.strategy()`` returns."""

    @classmethod
    def available(cls) -> Availability:
        found = tensorflow_version()
        if found is None:
            return Availability(False, "TensorFlow is not installed", TF_FIX)
        return Availability.yes(f"TensorFlow {found}")

    @classmethod
    def prepare_tensorflow(cls, tf: Any, replicas: int) -> None:
        """Configure TensorFlow for ``replicas`` (``--nproc``) before anything runs. Must not raise for a TensorFlow
        it cannot configure: the script then runs as it would alone, and the job's last line says what it got."""

    @classmethod
    @abstractmethod
    def build(cls, tf: Any, replicas: int) -> Any:
        """The ``tf.distribute`` strategy of this process."""


def keras_method(name: str | None) -> type[KerasMethod] | None:
    """The TensorFlow method called ``name``, or None (no name, a torch method, a name no registry entry has)."""
    if not name:
        return None
    from paratrain.errors import ParatrainError
    from paratrain.strategies import registry

    try:
        entry = registry.info(name)
    except ParatrainError:
        return None
    if entry.framework != "tensorflow" or not entry.implemented:
        return None
    cls = entry.load()
    return cls if isinstance(cls, type) and issubclass(cls, KerasMethod) else None
