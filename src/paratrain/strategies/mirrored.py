"""``mirrored``: tf.distribute.MirroredStrategy — one process, one replica per GPU (or per logical CPU device).

The launcher starts one process with ``--nproc`` replicas. Right after the script's ``import tensorflow`` the worker
makes that many devices visible — the first N GPUs, or on a machine without one the CPU split into N logical
devices — so a native script's own ``MirroredStrategy()`` gets the replicas asked for; ``ptf.strategy()`` builds
the strategy over them.
"""

from __future__ import annotations

from typing import Any

from paratrain.errors import ConfigError
from paratrain.strategies._tensorflow import KerasMethod
from paratrain.strategies.base import Method


class MirroredStrategy(KerasMethod):
    method = Method.MIRRORED

    @classmethod
    def prepare_tensorflow(cls, tf: Any, replicas: int) -> None:
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            if 0 < replicas < len(gpus):
                tf.config.set_visible_devices(gpus[:replicas], "GPU")
            return
        cpu = tf.config.list_physical_devices("CPU")[0]
        if replicas > 1 and not tf.config.get_logical_device_configuration(cpu):
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)

    @classmethod
    def build(cls, tf: Any, replicas: int) -> Any:
        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            if replicas > len(gpus):
                raise ConfigError(f"--nproc {replicas} asks for more replicas than the {len(gpus)} visible GPUs",
                                  hint=f"use --nproc {len(gpus)} or fewer")
            chosen = gpus[: replicas or len(gpus)]
            return tf.distribute.MirroredStrategy([f"/gpu:{d.name.rsplit(':', 1)[-1]}" for d in chosen])
        count = replicas or 1
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            if len(tf.config.list_logical_devices("CPU")) != count:  # else the launcher's worker split it already
                raise ConfigError("TensorFlow was already running when paratrain.tf.strategy() was called, so the "
                                  "CPU can no longer be split into replicas",
                                  hint="call ptf.strategy() first, before building a model, dataset or any tensor") \
                    from None
        # Without GPUs TensorFlow's default reduces through one device; say so explicitly (NCCL needs GPUs).
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(count)],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
