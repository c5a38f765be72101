"""What the TensorFlow methods share: availability without importing TensorFlow, and the Keras runtime protocol
their training goes through (:mod:`paratrain.tf`, not the Session)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from abc import abstractmethod
from typing import Any

from paratrain.probes import Component, probe
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


# TensorFlow's Keras (3, or tf_keras for multiworker fit) and the devices it sees; quiet: TF logs to stderr at import.
_TF_PROBE = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import importlib.metadata as m, tensorflow as tf
def v(d):
    try:
        return m.version(d)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"keras": v("keras"), "tf_keras": v("tf-keras"),
                  "devices": {k: len(tf.config.list_physical_devices(k)) for k in ("CPU", "GPU")}}))
"""


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
    def doctor_component(cls, timeout: float) -> Component:
        version = tensorflow_version()
        if version is None:
            return Component("TensorFlow", None, "not installed", TF_FIX)
        info = probe(_TF_PROBE, timeout)
        if "error" in info:
            return Component("TensorFlow", version, f"error: {info['error']}",
                             'pip install --force-reinstall "paratrain[tf]"')
        devices = ", ".join(f"{n} {k}" for k, n in info["devices"].items() if n)
        legacy = (f"tf_keras {info['tf_keras']} (multiworker fit)" if info["tf_keras"]
                  else "no tf_keras (multiworker fit)")
        return Component("TensorFlow", version, f"Keras {info['keras']}; {legacy}; devices: {devices}",
                         "" if info["tf_keras"] else tf_keras_fix())

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
