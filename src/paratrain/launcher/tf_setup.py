"""What a worker of a TensorFlow launch does right after the script's own ``import tensorflow`` has finished.

Two things, so that an unchanged Keras script — one that builds its own ``tf.distribute.MirroredStrategy()`` and
never calls ``ptf.strategy()`` — gets what ``paratrain run`` was asked for, and the launcher's last line says what
actually ran rather than repeating the flag:

- **The replicas.** ``MirroredStrategy()`` without arguments takes every visible GPU, or else every logical CPU
  device — one, unless someone split the CPU before TensorFlow's runtime started. So under ``mirrored`` on a machine
  without GPUs the worker splits the CPU into ``--nproc`` logical devices here, the moment the import completes
  (the only time that is sure to be before the script's first op); on GPUs it leaves the first ``--nproc`` of the
  visible GPUs visible to TensorFlow (``tf.config.set_visible_devices``, TensorFlow's own ``CUDA_VISIBLE_DEVICES``:
  it composes with the user's). Either is a default only: TensorFlow lets a script reconfigure devices until its
  runtime starts, so a script that configures its own wins, and ``ptf.strategy()`` sets the same split again.
- **The record.** Every ``tf.distribute`` strategy the script builds is noted (its class and
  ``num_replicas_in_sync``) by wrapping the strategies' common constructor; TensorFlow's default strategy, which
  Keras builds on its own whenever something runs outside a scope, is not. The worker puts the last one in its
  ``done`` note (:func:`report`); a script that imported TensorFlow and built none trained under the default
  strategy: one replica.

This module imports nothing heavy: the worker imports it up front, and TensorFlow is only touched once the script
has imported it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from types import ModuleType
from typing import Any

from paratrain.distenv import NPROC_VAR, STRATEGY_VAR

_DISTRIBUTE_LIB = "tensorflow.python.distribute.distribute_lib"
_seen: dict[str, Any] = {}  # the last strategy the script built: {"strategy", "replicas", "multi_worker"}


def prepare(tf: ModuleType) -> None:
    """Right after ``import tensorflow``: the replicas the launch asked for, and the record of what the script
    builds. Neither may break the script's import: on a TensorFlow this cannot configure, the script runs as it
    would alone, and the launcher's last line says what it got."""
    with contextlib.suppress(Exception):
        _record_strategies()
    with contextlib.suppress(Exception):
        from paratrain.strategies._tensorflow import keras_method

        if (method := keras_method(os.environ.get(STRATEGY_VAR))) is not None:
            method.prepare_tensorflow(tf, _wanted())  # mirrored: --nproc devices for the script's strategy


def _wanted() -> int:
    text = os.environ.get(NPROC_VAR, "")
    return int(text) if text.isdigit() else 0


def _record_strategies() -> None:
    """Wrap the constructor every tf.distribute strategy (V1 and V2) ends in, once per process."""
    lib = importlib.import_module(_DISTRIBUTE_LIB)
    base = lib.StrategyBase
    if getattr(base.__init__, "_paratrain_records", False):
        return
    defaults = tuple(getattr(lib, name) for name in ("_DefaultDistributionStrategy", "_DefaultDistributionStrategyV1")
                     if hasattr(lib, name))
    original = base.__init__

    @functools.wraps(original)
    def __init__(self: Any, extended: Any) -> None:
        original(self, extended)
        if not isinstance(self, defaults):
            _seen.clear()
            _seen["strategy"] = type(self).__name__
            with contextlib.suppress(Exception):  # a strategy that cannot count its replicas: built, count unknown
                _seen["replicas"] = int(self.num_replicas_in_sync)
            with contextlib.suppress(Exception):  # does it span the workers (MultiWorkerMirroredStrategy)?
                _seen["multi_worker"] = bool(self.extended._in_multi_worker_mode())

    __init__._paratrain_records = True  # type: ignore[attr-defined]
    base.__init__ = __init__


def report() -> dict[str, Any]:
    """What the worker's ``done`` note says about the script's strategy: ``{"strategy", "replicas",
    "multi_worker"}`` (a key it could not read is left out), or nothing
    when TensorFlow was never imported (or the record could not be installed) — the launcher then says so."""
    if _seen:
        return dict(_seen)
    lib = sys.modules.get(_DISTRIBUTE_LIB)
    if lib is not None and getattr(lib.StrategyBase.__init__, "_paratrain_records", False):
        return {"strategy": "default", "replicas": 1, "multi_worker": False}  # TensorFlow ran under its default
    return {}
