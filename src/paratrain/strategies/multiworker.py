"""``multiworker``: tf.distribute.MultiWorkerMirroredStrategy — one process per worker, on one or more machines.

Options: ``collective`` = auto | ring | nccl (TensorFlow's CommunicationImplementation; nccl needs GPUs) and ``port``
(worker i listens on port+i; default free ports), for clusters where only known ports are open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from paratrain.errors import ConfigError
from paratrain.strategies._tensorflow import KerasMethod, tf_keras_fix, version
from paratrain.strategies.base import Availability, Method, StrategyOptions


@dataclass(frozen=True, kw_only=True)
class MultiWorkerOptions(StrategyOptions):
    collective: Literal["auto", "ring", "nccl"] = "auto"
    port: int | None = None
    shorthands: ClassVar = {"ring": {"collective": "ring"}, "nccl": {"collective": "nccl"}}

    def __post_init__(self) -> None:
        if self.port is not None and not 1024 <= self.port <= 65000:
            raise ValueError(f"port={self.port} must be between 1024 and 65000")


class MultiWorkerStrategy(KerasMethod):
    method = Method.MULTIWORKER
    options_type = MultiWorkerOptions

    @classmethod
    def available(cls) -> Availability:
        found = super().available()
        if found.ok and version("tf-keras") is None:
            # Keras 3's fit() fails under MultiWorkerMirroredStrategy (keras-team/keras#20585): tf_keras is the Keras
            # paratrain runs multiworker fit() with. Custom loops with strategy.run work without it.
            return Availability(False, "tf_keras is not installed (Keras 3's fit() fails under multiworker)",
                                tf_keras_fix())
        return found

    @classmethod
    def build(cls, tf: Any, replicas: int) -> Any:
        from paratrain.distenv import DistEnv
        from paratrain.launcher.worker import note

        choice = DistEnv.from_environ().options.get("collective", "auto")
        impl = tf.distribute.experimental.CommunicationImplementation
        known = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}
        if choice not in known:
            raise ConfigError(f'multiworker option collective="{choice}" is not one of auto, ring, nccl')
        if choice == "nccl" and not tf.config.list_physical_devices("GPU"):
            raise ConfigError("multiworker:collective=nccl needs GPUs, and none is visible",
                              hint="use multiworker:collective=ring (or auto) on CPUs")
        note("waiting", {})  # the launcher's start-up deadline applies from here (the constructor already waits)
        options = tf.distribute.experimental.CommunicationOptions(implementation=known[choice])
        built = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        # Wait until every worker is up (one tiny all-reduce), then tell the launcher: its start-up deadline covers
        # exactly the time a missing worker would otherwise leave the others waiting without a word.
        total = built.reduce("SUM", built.run(tf.function(lambda: tf.constant(1.0))), axis=None)
        if int(total.numpy()) != built.num_replicas_in_sync:  # pragma: no cover - TensorFlow's own invariant
            raise ConfigError(f"only {int(total.numpy())} of {built.num_replicas_in_sync} replicas answered")
        note("joined", {})
        return built
