"""Global-batch datasets for tf.distribute, with the auto-shard policy chosen on purpose.

``batched(ds, 128)`` batches with the *global* batch; Keras then splits every batch across the replicas (and, under
``multiworker``, across the workers), as the torch Session does. The auto-shard policy is set to ``DATA`` rather than
left on ``AUTO``: ``AUTO`` tries to shard by *file* and, for an in-memory dataset (``from_tensor_slices``), falls
back to ``DATA`` with a warning on every worker; ``FILE`` would fail outright. ``DATA`` gives each worker its part of
each global batch, so the job sees every sample once per epoch, in the order one process would.
Under ``horovod`` (no tf.distribute strategy spans the processes) each rank takes its rows of each global batch
itself (:func:`paratrain.tf.horovod.shard`).
"""

from __future__ import annotations

from typing import Any


def shard_by_data(dataset: Any) -> Any:
    """The dataset with auto-shard policy ``DATA`` (see the module docstring); a dataset of *global batches*."""
    import tensorflow as tf

    from paratrain.tf import horovod

    if horovod.active():
        return horovod.shard(dataset)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def batched(dataset: Any, global_batch: int, drop_remainder: bool = False) -> Any:
    """``dataset`` in global batches of ``global_batch`` samples, sharded by data across workers."""
    if global_batch < 1:
        from paratrain.errors import ConfigError

        raise ConfigError(f"global batch {global_batch} must be at least 1")
    return shard_by_data(dataset.batch(global_batch, drop_remainder=drop_remainder))
