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

from paratrain.distenv import NPROC_VAR, STRATEGY_VAR, DistEnv
from paratrain.errors import ConfigError
from paratrain.tf import horovod

_built: Any = None  # one strategy per process: TensorFlow allows only one MultiWorkerMirroredStrategy


def method() -> str:
    """``mirrored``, ``multiworker``, ``horovod`` or ``single`` (no launcher, or a torch method's variables)."""
    chosen = os.environ.get(STRATEGY_VAR, "")
    if chosen in ("mirrored", "multiworker", horovod.METHOD):
        return chosen
    return "multiworker" if os.environ.get("TF_CONFIG") else "single"


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
    return _task()[0] if method() == "multiworker" else 0


def world_size() -> int:
    """Processes in the job (not replicas: a mirrored process holds several)."""
    if horovod.active():
        return horovod.size()
    return _task()[1] if method() == "multiworker" else 1


def is_main() -> bool:
    """True in the one process that should print, write files and save the checkpoint (TF's "chief")."""
    return rank() == 0


def main_print(*args: Any, **kwargs: Any) -> None:
    """print() on the main process only: N workers do not print N copies of the same line."""
    if is_main():
        print(*args, **kwargs)
        sys.stdout.flush()


def _replicas() -> int:
    text = os.environ.get(NPROC_VAR, "")
    return int(text) if text.isdigit() and int(text) > 0 else 0


def _mirrored(tf: Any) -> Any:
    gpus = tf.config.list_physical_devices("GPU")
    wanted = _replicas()
    if gpus:
        if wanted > len(gpus):
            raise ConfigError(f"--nproc {wanted} asks for more replicas than the {len(gpus)} visible GPUs",
                              hint=f"use --nproc {len(gpus)} or fewer")
        chosen = gpus[: wanted or len(gpus)]
        return tf.distribute.MirroredStrategy([f"/gpu:{d.name.rsplit(':', 1)[-1]}" for d in chosen])
    count = wanted or 1
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        if len(tf.config.list_logical_devices("CPU")) != count:  # else the launcher's worker split it already
            raise _too_late() from None
    # Without GPUs TensorFlow's default reduces through one device; say so explicitly (NCCL needs GPUs).
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(count)],
                                          cross_device_ops=tf.distribute.ReductionToOneDevice())


def _too_late() -> ConfigError:
    return ConfigError("TensorFlow was already running when paratrain.tf.strategy() was called, so the CPU can no "
                       "longer be split into replicas",
                       hint="call ptf.strategy() first, before building a model, dataset or any tensor")


def _multiworker(tf: Any) -> Any:
    choice = DistEnv.from_environ().options.get("collective", "auto")
    impl = tf.distribute.experimental.CommunicationImplementation
    known = {"auto": impl.AUTO, "ring": impl.RING, "nccl": impl.NCCL}
    if choice not in known:
        raise ConfigError(f'multiworker option collective="{choice}" is not one of auto, ring, nccl')
    if choice == "nccl" and not tf.config.list_physical_devices("GPU"):
        raise ConfigError("multiworker:collective=nccl needs GPUs, and none is visible",
                          hint="use multiworker:collective=ring (or auto) on CPUs")
    options = tf.distribute.experimental.CommunicationOptions(implementation=known[choice])
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def strategy() -> Any:
    """The strategy for this process; built once, the same object on every later call."""
    global _built
    if _built is not None:
        return _built
    import tensorflow as tf

    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") >= "2":  # the launcher's quiet default: Python's warnings too
        tf.get_logger().setLevel("ERROR")
    threads = os.environ.get("TF_NUM_INTRAOP_THREADS", "")
    if threads.isdigit() and int(threads) > 0:  # the launcher's share of the cores (before the runtime starts)
        with contextlib.suppress(RuntimeError):  # already running: TensorFlow read TF_NUM_INTRAOP_THREADS itself
            tf.config.threading.set_intra_op_parallelism_threads(int(threads))
    chosen = method()
    if chosen == "mirrored":
        _built = _mirrored(tf)
    elif chosen == "multiworker":
        from paratrain.launcher.worker import note

        note("waiting", {})  # the launcher's start-up deadline applies from here (the constructor already waits)
        _built = _multiworker(tf)
        _joined(tf, _built)
    else:
        if chosen == horovod.METHOD:
            horovod.hvd()  # hvd.init(): Horovod's Keras recipe starts here
        _built = tf.distribute.get_strategy()
    return _built


def _joined(tf: Any, strat: Any) -> None:
    """Wait until every worker is up (one tiny all-reduce), then tell the launcher: its start-up deadline covers
    exactly the time a missing worker would otherwise leave the others waiting without a word."""
    from paratrain.launcher.worker import note

    total = strat.reduce("SUM", strat.run(tf.function(lambda: tf.constant(1.0))), axis=None)
    if int(total.numpy()) != strat.num_replicas_in_sync:  # pragma: no cover - TensorFlow's own invariant
        raise ConfigError(f"only {int(total.numpy())} of {strat.num_replicas_in_sync} replicas answered")
    note("joined", {})
