"""The tf.distribute strategy `paratrain run` chose, built from the same ``PARATRAIN_*`` contract as ``Session``.

``mirrored`` is one process with N replicas: the visible GPUs, or — on a CPU-only machine — the CPU split into N
logical devices, so ``--nproc 2`` really gives two replicas (and a CPU-only box can try the method). Logical devices
exist only if they are configured before TensorFlow initialises its runtime, which is why :func:`strategy` must
come before any TensorFlow op — except under ``paratrain run``, whose worker splits the CPU as soon as the script has
imported TensorFlow (:mod:`paratrain.launcher.tf_setup`), so a later call finds the devices there.
``multiworker`` is one process per worker; ``TF_CONFIG`` (written by the launcher, or by the user for a native
script) says who is who. ``horovod`` is one process per worker too, each on TensorFlow's default strategy, with
Horovod averaging the gradients (:mod:`paratrain.tf.horovod`). A plain ``python train.py`` gets TensorFlow's default
strategy, so the same script runs everywhere unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from paratrain.distenv import NPROC_VAR, STRATEGY_VAR
from paratrain.errors import ConfigError
from paratrain.strategies import registry
from paratrain.strategies._tensorflow import keras_method
from paratrain.tf import horovod

_built: Any = None  # one strategy per process: TensorFlow allows only one MultiWorkerMirroredStrategy


def method() -> str:
    """The TensorFlow method the launcher chose (``mirrored``, ``multiworker``), ``horovod``, or — no launcher, or a
    torch method's variables — ``multiworker`` for a native TF_CONFIG and ``single`` otherwise."""
    chosen = os.environ.get(STRATEGY_VAR, "")
    if chosen == horovod.METHOD or keras_method(chosen) is not None:
        return chosen
    return "multiworker" if os.environ.get("TF_CONFIG") else "single"


def _spans_workers() -> bool:
    """Is this process one of several workers of a TF_CONFIG cluster (not one process holding every replica)?"""
    chosen = method()
    return chosen not in ("single", horovod.METHOD) and registry.info(chosen).multi_process


def _task() -> tuple[int, int]:
    """(this worker's index, number of workers) from TF_CONFIG; (0, 1) without one."""
    text = os.environ.get("TF_CONFIG")
    if not text:
        return 0, 1
    try:
        config = json.loads(text)
        workers = config["cluster"].get("worker", [])
        chief = config["cluster"].get("chief", [])
        task = config["task"]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError("TF_CONFIG is not a valid cluster spec",
                          hint='expected {"cluster": {"worker": [...]}, "task": {"type": "worker", "index": N}}') \
            from None
    index = int(task.get("index", 0)) + (len(chief) if task.get("type") == "worker" else 0)
    return index, len(workers) + len(chief)


def rank() -> int:
    """This process's index among the workers (0 for mirrored and single: one process)."""
    if horovod.active():
        return horovod.rank()
    return _task()[0] if _spans_workers() else 0


def world_size() -> int:
    """Processes in the job (not replicas: a mirrored process holds several)."""
    if horovod.active():
        return horovod.size()
    return _task()[1] if _spans_workers() else 1


def is_main() -> bool:
    """True in the one process that should print, write files and save the checkpoint (TF's "chief")."""
    return rank() == 0


def main_print(*args: Any, **kwargs: Any) -> None:
    """print() on the main process only: N workers do not print N copies of the same line."""
    if is_main():
        print(*args, **kwargs)
        sys.stdout.flush()


def strategy() -> Any:
    """The strategy for this process; built once, the same object on every later call."""
    global _built
    if _built is not None:
        return _built
    import tensorflow as tf

    from paratrain.metrics import start_peak_rss

    start_peak_rss()  # this worker's peak memory is counted from here, as from a torch script's Session()

    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") >= "2":  # the launcher's quiet default: Python's warnings too
        tf.get_logger().setLevel("ERROR")
    threads = os.environ.get("TF_NUM_INTRAOP_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # the launcher's share of the cores (before the runtime starts)
        with contextlib.suppress(RuntimeError):  # already running: TensorFlow read TF_NUM_INTRAOP_THREADS itself
            tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    chosen = method()
    if (keras := keras_method(chosen)) is not None:
        text = os.environ.get(NPROC_VAR, "")
        _built = keras.build(tf, int(text) if text.isdigit() and int(text) > 0 else 0)
    else:
        if chosen == horovod.METHOD:
            horovod.hvd()  # hvd.init(): Horovod's Keras recipe starts here
        _built = tf.distribute.get_strategy()
    return _built


