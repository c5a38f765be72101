"""``multiworker``: tf.distribute.MultiWorkerMirroredStrategy — one process per worker, on one or more machines.

Options: ``collective`` = auto | ring | nccl (TensorFlow's CommunicationImplementation; nccl needs GPUs) and ``port``
(worker i listens on port+i; default free ports), for clusters where only known ports are open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from paratrain.strategies._tensorflow import TensorFlowStrategy, tf_keras_fix, version
from paratrain.strategies.base import Availability, Method, StrategyOptions


@dataclass(frozen=True, kw_only=True)
class MultiWorkerOptions(StrategyOptions):
    collective: Literal["auto", "ring", "nccl"] = "auto"
    port: int | None = None
    shorthands: ClassVar = {"ring": {"collective": "ring"}, "nccl": {"collective": "nccl"}}

    def __post_init__(self) -> None:
        if self.port is not None and not 1024 <= self.port <= 65000:
            raise ValueError(f"port={self.port} must be between 1024 and 65000")


class MultiWorkerStrategy(TensorFlowStrategy):
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
