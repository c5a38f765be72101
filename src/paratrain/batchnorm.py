"""BatchNorm under several processes: SyncBatchNorm where it works (GPUs), one clear notice where it cannot (CPU).

Why: with N ranks each BatchNorm layer normalises batch/N samples instead of the global batch, which silently changes
the training (a small CNN ended at a loss of 0.144 on 2 ranks against 0.104 in one process). torch's SyncBatchNorm
all-reduces the statistics so every rank normalises with the global batch's — but only for GPU modules (DDP refuses
it on CPU: "SyncBatchNorm layers only work with GPU modules").
"""

from __future__ import annotations

from typing import Any

from torch import nn

from paratrain.console import notice
from paratrain.model_facts import batchnorm_layers


def convert(model: nn.Module, *, multi_process: bool, world_size: int, device_type: str, enabled: bool,
            is_main: bool, training: bool = True, group: Any = None) -> nn.Module:
    """The model to train: its BatchNorm layers converted to SyncBatchNorm when that is possible and wanted.

    The conversion keeps the same Parameter objects, so an optimizer built on the original model stays valid.
    Elsewhere (CPU, or turned off) the model is returned unchanged, with one notice on the main rank when its
    statistics will come from each rank's slice of the batch. ``training=False`` (prepare() without an optimizer:
    evaluation only) leaves it alone and silent — eval-mode BatchNorm reads its running statistics, not the batch.
    ``world_size`` and ``group`` are the data-parallel replicas' (the ranks that read different batches; None: all)."""
    # one process, dp (replicas inside one process) or evaluation only: there are no per-rank statistics to sync
    if world_size < 2 or not multi_process or not training:
        return model
    layers = batchnorm_layers(model)
    if not layers:
        return model
    if device_type == "cuda" and enabled:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model, process_group=group)
    if is_main:
        why = ("--no-sync-batchnorm was given" if device_type == "cuda"
               else "SyncBatchNorm needs GPUs (DDP refuses it on CPU)")
        notice(f"{', '.join(layers)} normalise each rank's slice of the batch ({why}): with {world_size} ranks the "
               "statistics come from 1/{} of the global batch, so losses differ from one process by more than "
               "float rounding; `paratrain compare` judges such cells against its split-batch noise floor"
               .replace("{}", str(world_size)))
    return model
