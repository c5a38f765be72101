"""Keras callbacks that give a Keras script what ``Session`` gives a PyTorch one: compare's measurements
(``PARATRAIN_METRICS``: the same per-rank JSON lines, so the report treats both frameworks alike), compare's
``--steps`` limit, and the launcher's ``--checkpoint-dir`` as ``BackupAndRestore`` (a killed job resumes).

They subclass the ``Callback`` of ``tf.keras`` — Keras 3, or tf_keras when ``TF_USE_LEGACY_KERAS=1`` (which the
launcher sets for ``multiworker``): the Keras the script's model comes from.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from paratrain.distenv import CHECKPOINT_DIR_VAR, CHECKPOINT_EVERY_VAR, METRICS_VAR
from paratrain.metrics import peak_rss_above_start, peak_rss_bytes
from paratrain.run_hooks import RunHooks
from paratrain.tf import strategy as strategies


def keras() -> Any:
    """The Keras module ``tf.keras`` resolves to here (tf_keras under ``TF_USE_LEGACY_KERAS=1``, else Keras 3)."""
    import tensorflow as tf

    return tf.keras


def keras_version() -> str:
    """"3.x" for Keras 3, "tf_keras 2.x" for the legacy Keras that ``TF_USE_LEGACY_KERAS=1`` selects."""
    module = keras()
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    import tf_keras

    return f"tf_keras {tf_keras.__version__}"


def _bytes(variables: Any) -> int:
    import numpy as np

    def one(v: Any) -> int:
        size = getattr(v.dtype, "size", None) or np.dtype(v.dtype).itemsize  # a tf.DType, or Keras 3's dtype name
        return int(np.prod(v.shape)) * int(size)

    return sum(one(v) for v in variables)


def _recorder_class() -> type:
    base = keras().callbacks.Callback

    class StepRecorder(base):  # type: ignore[misc, valid-type]
        """One JSON line per optimizer step, like the torch Session's. Keras reports the epoch's running mean
        loss after each batch, weighted by batch size; the batch's own loss is recovered from two consecutive means
        (in float64). The lines of an epoch are written at its end, scaled so that they agree with the epoch's
        logged loss: tf_keras under MultiWorkerMirroredStrategy reports per-batch means summed over the workers."""

        def __init__(self, folder: Path, max_steps: int | None, batch: int, samples: int | None) -> None:
            super().__init__()
            folder.mkdir(parents=True, exist_ok=True)
            self._file = (folder / f"rank{strategies.rank()}.jsonl").open("a", buffering=1)
            self._max_steps, self._step, self._last = max_steps, 0, time.perf_counter()
            self._batch, self._samples = batch, samples
            self._state_written = False
            self._world = strategies.world_size()
            self._pending: list[dict[str, Any]] = []
            self._mean, self._seen = 0.0, 0

        def _write(self, record: dict[str, Any]) -> None:
            if not self._file.closed:
                self._file.write(json.dumps(record) + "\n")

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self._mean, self._seen = 0.0, 0
            self._write({"epoch_start": epoch, "t": time.time()})

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._flush(_job_mean(float((logs or {}).get("loss", self._mean))))
            self._write({"epoch_end": epoch, "t": time.time()})

        def _flush(self, epoch_loss: float) -> None:
            scale = 1.0
            if self._mean and epoch_loss and math.isfinite(self._mean / epoch_loss):
                ratio = self._mean / epoch_loss
                scale = float(round(ratio)) if round(ratio) >= 1 and abs(ratio - round(ratio)) < 1e-3 else ratio
            for record in self._pending:
                record["loss"] /= scale
                self._write(record)
            self._pending = []

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._last = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = time.perf_counter()
            mean = _job_mean(float((logs or {}).get("loss", float("nan"))))
            size = self._batch
            if self._samples:  # the last batch of a pass is short
                size = max(1, min(self._batch, self._samples - self._seen % self._samples))
            loss = ((self._seen + size) * mean - self._seen * self._mean) / size
            self._mean, self._seen = mean, self._seen + size
            self._step += 1
            if not self._state_written:
                self._write_state()
            self._pending.append({"step": self._step, "t": time.time(), "dt": now - self._last, "loss": loss,
                                  "samples": size // self._world})  # no phases: Keras does not time them
            if self._max_steps and self._step >= self._max_steps:
                self.model.stop_training = True

        def _write_state(self) -> None:
            model = self.model
            params = _bytes(model.weights)
            grads = _bytes(model.trainable_weights)
            optim = _bytes(getattr(model.optimizer, "variables", [])) if model.optimizer is not None else 0
            if callable(optim):  # tf_keras' optimizer.variables is a method
                optim = _bytes(model.optimizer.variables())
            import tensorflow as tf

            threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count()
            self._write({"state_bytes": {"params": params, "grads": grads, "optimizer": optim,
                                         "total": params + grads + optim},
                         "threads": threads, "param_count": int(model.count_params()),
                         "model": {"framework": "tensorflow"}})
            self._state_written = True

        def on_train_end(self, logs: Any = None) -> None:
            self._flush(self._mean)
            self._write({"summary": True, "peak_rss_bytes": peak_rss_bytes(),
                         "peak_rss_above_start_bytes": peak_rss_above_start(), "t": time.time()})
            self._file.close()

    return StepRecorder


def _job_mean(loss: float) -> float:
    """The loss of the whole job: under Horovod each rank's Keras logs the loss of its own rows only (every rank
    calls this for every batch, so the all-reduce matches up); tf.distribute's logs already span the job."""
    from paratrain.tf import horovod

    return horovod.average(loss) if horovod.active() and horovod.size() > 1 else loss


def log(**values: Any) -> None:
    """Record named values (accuracy, final loss) for compare's report; a no-op outside a measured run."""
    folder = os.environ.get(METRICS_VAR)
    if folder and strategies.is_main():
        Path(folder).mkdir(parents=True, exist_ok=True)
        with (Path(folder) / f"rank{strategies.rank()}.jsonl").open("a") as fh:
            fh.write(json.dumps({"log": values}) + "\n")


def backup_and_restore(directory: str | os.PathLike[str], every: int | None = None) -> Any:
    """Keras' BackupAndRestore: state saved every ``every`` steps (default: at each epoch end), restored when a
    killed job is started again (and removed once a fit completes)."""
    return keras().callbacks.BackupAndRestore(backup_dir=str(directory), save_freq=every or "epoch")


def callbacks(global_batch: int, *, samples: int | None = None, max_steps: int | None = None) -> list[Any]:
    """The callbacks the launcher asked for: Horovod's optimizer, broadcast and metric average under ``--strategy
    horovod``, compare's recorder when measuring, BackupAndRestore with ``--checkpoint-dir``. Pass them to
    ``model.fit(..., callbacks=ptf.callbacks(128))``. Keras does not say how many samples a step took:
    ``global_batch`` is the batch the dataset was batched with and ``samples`` the size of one pass (its last batch
    is short); ``max_steps`` ends the fit after that many steps (compare's ``--steps`` for a user's script
    overrides it)."""
    from paratrain.tf import horovod

    out: list[Any] = horovod.callbacks() if horovod.active() else []
    folder = os.environ.get(METRICS_VAR)
    if folder:
        limit = RunHooks.from_environ().max_steps
        out.append(_recorder_class()(Path(folder), limit or max_steps, global_batch, samples))
    backup = os.environ.get(CHECKPOINT_DIR_VAR)
    if backup:  # --checkpoint-dir DIR --checkpoint-every N
        every = os.environ.get(CHECKPOINT_EVERY_VAR, "")
        out.append(backup_and_restore(backup, int(every) if every.isdigit() else None))
    return out
