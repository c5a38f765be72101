"""``mirrored``: tf.distribute.MirroredStrategy — one process, one replica per GPU (or per logical CPU device).

The launcher starts one process with ``PARATRAIN_NPROC`` replicas; :func:`paratrain.tf.strategy` builds the
strategy over the GPUs, or splits the CPU into that many logical devices on a machine without one.
"""

from __future__ import annotations

from paratrain.strategies._tensorflow import TensorFlowStrategy
from paratrain.strategies.base import Method


class MirroredStrategy(TensorFlowStrategy):
    method = Method.MIRRORED
