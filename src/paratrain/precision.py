"""Numeric precision, applied the same way under every method that does not bring its own.

``bf16-mixed`` / ``fp16-mixed`` run the model's forward under ``torch.autocast`` (the outermost module's forward,
so DDP's and DataParallel's own work is inside it, as torch's AMP recipe for them says) and hand back fp32 outputs,
so a loss computed outside the model is computed in fp32 under every method. ``fp16-mixed`` adds a gradient scaler
(fp16's range is too small for small gradients). ``bf16-true`` casts the model itself, and floating inputs with it.
A method with a native policy (FSDP's ``MixedPrecisionPolicy``) applies it itself: see
``Strategy.native_precision``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._pytree import tree_map

from paratrain.errors import ConfigError


def check_supported(precision: str, device: torch.device) -> None:
    """A precision the device cannot do is an error naming what it can."""
    if device.type == "cuda":
        if precision.startswith("bf16") and not torch.cuda.is_bf16_supported():
            raise ConfigError(f"precision {precision}: this GPU does not support bf16",
                              hint="use fp16-mixed or fp32 here")
        return
    if precision == "fp16-mixed":
        raise ConfigError(f"precision fp16-mixed needs a GPU ({device.type} here)",
                          hint="on a CPU use bf16-mixed, bf16-true or fp32")


def _cast(dtype: torch.dtype):
    def cast(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != dtype:
            return value.to(dtype)
        return value
    return cast


def apply(model: torch.nn.Module, precision: str, device: torch.device) -> None:
    """Make ``model(...)`` run in ``precision``: patches the instance's ``forward`` (state dict keys unchanged)."""
    if precision == "fp32":
        return
    original = model.forward
    if precision == "bf16-true":
        to_bf16, to_fp32 = _cast(torch.bfloat16), _cast(torch.float32)

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = tree_map(to_bf16, (args, kwargs))
            return tree_map(to_fp32, original(*args, **kwargs))
    else:
        dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
        to_fp32 = _cast(torch.float32)

        @functools.wraps(original)
        def forward(*args: Any, **kwargs: Any) -> Any:
            with torch.autocast(device.type, dtype=dtype):
                out = original(*args, **kwargs)
            return tree_map(to_fp32, out)
    model.forward = forward


def scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """fp16-mixed's loss scaler (its state is saved in checkpoints); None for every other precision."""
    return torch.amp.GradScaler(device.type) if precision == "fp16-mixed" else None
