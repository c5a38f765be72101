"""paratrain for TensorFlow / Keras: the strategy the launcher chose, with the same contract as ``Session``.

    from paratrain import tf as ptf
    strategy = ptf.strategy()                 # first: before any TensorFlow op
    with strategy.scope():
        model = build(); model.compile(...)
    model.fit(ptf.batched(dataset, 128), callbacks=ptf.callbacks(128))

``paratrain run --strategy mirrored --nproc 2`` gives a MirroredStrategy over two replicas (GPUs, or two logical
CPU devices), ``--strategy multiworker --nproc 2`` two processes with their ``TF_CONFIG``, and ``python train.py``
TensorFlow's default strategy. Batches are *global*: a dataset batched with 128 trains on 128 samples per step
whatever the number of replicas. Importing this package does not import TensorFlow.
"""

from __future__ import annotations

from paratrain.tf.callbacks import backup_and_restore, callbacks, keras, keras_version, log
from paratrain.tf.checkpoint import Manager, checkpoint_manager
from paratrain.tf.data import batched, shard_by_data
from paratrain.tf.strategy import is_main, main_print, method, rank, strategy, world_size

__all__ = ["Manager", "backup_and_restore", "batched", "callbacks", "checkpoint_manager", "is_main", "keras",
           "keras_version", "log", "main_print", "method", "rank", "shard_by_data", "strategy", "world_size"]
