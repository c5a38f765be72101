"""What a model contains that makes its loss curve differ between methods by more than float rounding.

Each measured run reports these facts, so ``paratrain compare`` can say *why* a cell is judged against a measured
noise floor instead of exactly ("model uses Dropout(p=0.1)…"), and the Session can warn about BatchNorm where
SyncBatchNorm is not possible.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd
from torch.nn.modules.dropout import _DropoutNd


def _counted(counter: Counter[str]) -> list[str]:
    return [name if n == 1 else f"{name} ×{n}" for name, n in counter.items()]


def param_count(model: nn.Module) -> int:
    """The whole model's parameters, wherever they are held: a sharded DTensor's numel() is its global size; a
    ZeRO-3 parameter's numel() is 0 between uses and its ds_numel the full count; a pipeline stage (which holds
    some blocks only) says the whole model's count itself."""
    if (whole := getattr(model, "paratrain_param_count", None)) is not None:
        return int(whole)
    return sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())


def batchnorm_layers(model: nn.Module) -> list[str]:
    """BatchNorm layers that normalise with per-process statistics (SyncBatchNorm excluded), counted by type."""
    return _counted(Counter(type(m).__name__ for m in model.modules()
                            if isinstance(m, _BatchNorm) and not isinstance(m, nn.SyncBatchNorm)))


def model_facts(model: nn.Module) -> dict[str, Any]:
    """``dropout``: random layers with p > 0 (each rank draws its own masks); ``batchnorm``: layers normalising
    each rank's slice; ``sync_batchnorm``: whether any SyncBatchNorm is present; ``conv``: convolutions, whose
    summation order changes with the batch split more than a linear layer's does."""
    modules = list(model.modules())
    dropout = Counter(f"{type(m).__name__}(p={m.p:g})" for m in modules if isinstance(m, _DropoutNd) and m.p > 0)
    return {"dropout": _counted(dropout), "batchnorm": batchnorm_layers(model),
            "sync_batchnorm": any(isinstance(m, nn.SyncBatchNorm) for m in modules),
            "conv": any(isinstance(m, _ConvNd) for m in modules)}
