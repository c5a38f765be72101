"""Horovod for a paratrain.tf (Keras) script: ``paratrain run --strategy horovod`` on the same script as
``mirrored`` and ``multiworker``.

Horovod is not a tf.distribute strategy: each process trains the default strategy's one replica on its part of
every global batch, and Horovod's Keras binding averages the gradients. paratrain does for the script what Horovod's
own Keras recipe asks of it: ``hvd.init()`` (in :func:`paratrain.tf.strategy`), ``hvd.DistributedOptimizer`` around
the compiled optimizer, ``BroadcastGlobalVariablesCallback(0)`` and ``MetricAverageCallback()`` (all among
:func:`paratrain.tf.callbacks`), and
each rank's share of the data (:func:`paratrain.tf.shard_by_data`). A script that calls Horovod itself runs
unchanged under ``--strategy horovod`` too: these helpers are used only by scripts written with paratrain.tf.

Horovod's Keras binding needs the Keras 2 optimizers (``tf_keras``): the launcher sets ``TF_USE_LEGACY_KERAS=1``.
"""

from __future__ import annotations

import os
from typing import Any

from paratrain.distenv import STRATEGY_VAR

METHOD = "horovod"


def active() -> bool:
    """Did the launcher choose Horovod for this process?"""
    return os.environ.get(STRATEGY_VAR, "") == METHOD


def hvd() -> Any:
    """Horovod's Keras binding, initialised (``hvd.init()`` is idempotent)."""
    from paratrain.errors import ConfigError

    try:
        import horovod.tensorflow.keras as binding
    except ImportError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"Horovod's TensorFlow binding does not load: {first}",
                          hint="run `paratrain setup horovod --force` with TensorFlow installed (it builds the "
                               "Keras binding too)") from None
    binding.init()
    return binding


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def average(value: float) -> float:
    """The mean of ``value`` over the ranks (each rank logs the loss of its own part of the batch)."""
    import tensorflow as tf

    binding = hvd()
    return float(binding.allreduce(tf.constant(value, tf.float64), op=binding.Average, name=None).numpy())


def shard(dataset: Any) -> Any:
    """Each rank's part of every global batch: rows ``rank, rank + size, ...``, so the ranks together see the batch
    one process would, in the same order (the Session's and tf.distribute's split, by stride)."""
    import tensorflow as tf

    r, n = rank(), size()
    if n == 1:
        return dataset

    def part(*element: Any) -> Any:
        picked = tf.nest.map_structure(lambda t: t[r::n], element)
        return picked if len(picked) > 1 else picked[0]

    return dataset.map(part)


def callbacks() -> list[Any]:
    """Horovod's Keras recipe, as callbacks: the compiled optimizer becomes ``hvd.DistributedOptimizer`` when
    training begins, rank 0's variables are broadcast after the first batch, and the epoch's metrics are averaged
    over the ranks."""
    import tensorflow as tf

    binding = hvd()

    class DistributedOptimizer(tf.keras.callbacks.Callback):  # type: ignore[misc, valid-type]
        """Wraps ``model.optimizer`` before Keras traces its train step (fit builds the step function before
        ``on_train_begin`` but traces it at the first batch, reading ``model.optimizer`` then)."""

        def on_train_begin(self, logs: Any = None) -> None:
            optimizer = self.model.optimizer
            if not getattr(optimizer, "_paratrain_horovod", False):
                wrapped = binding.DistributedOptimizer(optimizer)
                wrapped._paratrain_horovod = True
                self.model.optimizer = wrapped

    # MetricAverageCallback: the epoch's logged metrics (fit's history) become the job's, not rank 0's own rows'
    return [DistributedOptimizer(), binding.callbacks.BroadcastGlobalVariablesCallback(0),
            binding.callbacks.MetricAverageCallback()]
