"""Checkpoints of a Keras/TF job with ``tf.train.CheckpointManager``, in the multi-worker shape TensorFlow requires.

Every worker must take part in a save (the variables are mirrored and a save reads them collectively), but only
the main worker may write where the user asked: the others write to a private temporary folder that is removed
afterwards — TensorFlow's documented pattern, wrapped so a script does not have to get it right itself. The
manager writes a new numbered checkpoint and then updates its index, so a run killed mid-save keeps the previous
one, and the newest complete checkpoint wins on restore.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from paratrain.tf import strategy as strategies


class Manager:
    """``tf.train.CheckpointManager`` for the job: ``save()`` on every worker, ``restore_latest()`` on every
    worker (all read the main worker's folder, which must be shared between machines)."""

    def __init__(self, checkpoint: Any, directory: str | os.PathLike[str], max_to_keep: int = 3) -> None:
        import tensorflow as tf

        self.directory = str(directory)
        self._checkpoint = checkpoint
        self._scratch = None if strategies.is_main() else tempfile.mkdtemp(prefix="paratrain-tf-ckpt-")
        self._manager = tf.train.CheckpointManager(checkpoint, self._scratch or self.directory,
                                                   max_to_keep=max_to_keep)

    def save(self, step: int | None = None) -> str | None:
        """Save on every worker; returns the main worker's checkpoint path (None elsewhere)."""
        path = self._manager.save(checkpoint_number=step)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            return None
        return path

    def latest(self) -> str | None:
        import tensorflow as tf

        return tf.train.latest_checkpoint(self.directory)

    def restore_latest(self) -> str | None:
        """Restore the newest checkpoint in the main worker's folder; returns its path, or None when there is
        none yet (a first run)."""
        path = self.latest()
        if path:
            status = self._checkpoint.restore(path)
            try:
                status.assert_existing_objects_matched()
            except AssertionError:
                from paratrain.errors import CheckpointError

                raise CheckpointError(
                    f"checkpoint {path} does not hold this model's variables (another model, or written by the "
                    "other Keras: multiworker trains with tf_keras, mirrored and plain runs with Keras 3)",
                    hint="restore it under the Keras that wrote it: TF_USE_LEGACY_KERAS=1 for a multiworker "
                         "checkpoint") from None
            status.expect_partial()  # the optimizer's slots may be absent (a model-only checkpoint)
        return path


def checkpoint_manager(checkpoint: Any, directory: str | os.PathLike[str], max_to_keep: int = 3) -> Manager:
    return Manager(checkpoint, directory, max_to_keep)
