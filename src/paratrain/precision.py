"""Numeric precision, applied the same way under every method.

``bf16-mixed`` / ``fp16-mixed`` run the model's forward under ``torch.autocast`` with the weights kept in fp32 (the
outermost module's forward, so DDP's and DataParallel's own work is inside it, as torch's AMP recipe for them says)
and hand back fp32 outputs, so a loss computed outside the model is computed in fp32 under every method.
``fp16-mixed`` adds a gradient scaler (fp16's range is too small for small gradients). ``bf16-true`` casts the
model itself, and floating inputs with it.

Under the sharded methods (fsdp, fsdp+tp; DeepSpeed ZeRO in its own engine) bf16-mixed is the anchors' mixed
precision instead (:func:`sharded_policy`): fp32 shards, master weights and optimizer state, 16-bit parameters
gathered and computed with, gradients reduced in fp32 — half the gathered bytes and half the gathered memory of
gathering the fp32 shards. The autocast above stays on around it, for the tensors the policy does not cast.

A method whose engine runs autocast itself (DeepSpeed's ``torch_autocast``, which disables any autocast around its
forward) lists the precision in ``Strategy.native_precision``: then only the fp32 outputs and the fast-path guard
are added here, and the engine keeps its own scaler.

Why the replicated methods keep fp32 weights under autocast: their weights are never gathered, so 16-bit copies
would save no traffic, and autocast keeps the norms, softmax and residual stream in fp32. Why the sharded methods'
16-bit parameters need two guards: a policy casts the parameters but not the buffers (nor tensors the forward makes),
so an fp32 buffer such as a sinusoidal position table turns the activations fp32 — the autocast around the model
casts them back to 16 bits where a matrix multiply reads them, and :func:`match_norm_inputs` where a LayerNorm, whose
weights are 16-bit now, reads them (torch's CPU kernel refuses an fp32 input with bf16 weights: "mixed dtype (CPU):
expect parameter to have scalar type of Float").
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._pytree import tree_map

from paratrain.errors import ConfigError
from paratrain.fastpath import without_fastpath


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


def apply(model: torch.nn.Module, precision: str, device: torch.device, *, autocast: bool = True,
          cache: bool = True) -> None:
    """Make ``model(...)`` run in ``precision``: patches the instance's ``forward`` (state dict keys unchanged).

    ``autocast=False``: the method's engine runs autocast itself; outputs are still handed back in fp32.
    ``cache=False``: autocast casts a weight each time it is used instead of keeping the 16-bit copy until forward
    returns. That copy is what activation checkpointing drops, and under FSDP it is a copy of the gathered (whole)
    weight, which the unit frees after its forward: with the cache every rank ends forward holding the whole model
    in 16 bits (a 24 M llama under fsdp×2 with checkpointing: 262 MiB peak with it, 247 MiB without). The values
    are the same either way; a weight used twice in one forward is cast twice."""
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
            with torch.autocast(device.type, dtype=dtype, enabled=autocast, cache_enabled=cache), without_fastpath():
                out = original(*args, **kwargs)
            return tree_map(to_fp32, out)
    model.forward = forward


NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm)


def _input_as_weight(module: torch.nn.Module, args: tuple) -> tuple | None:
    weight = getattr(module, "weight", None)
    if weight is None or not args or not isinstance(args[0], torch.Tensor) or args[0].dtype == weight.dtype:
        return None
    return (args[0].to(weight.dtype), *args[1:])


def match_norm_inputs(model: torch.nn.Module) -> int:
    """Hand each LayerNorm/GroupNorm its input in its weights' dtype (a no-op when they agree); returns how many."""
    norms = [m for m in model.modules() if isinstance(m, NORMS)]
    for norm in norms:
        norm.register_forward_pre_hook(_input_as_weight)
    return len(norms)


def sharded_policy(model: torch.nn.Module, precision: str, mode: str = "params") -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for ``precision`` under a sharded method, or None (fp32 shards gathered).

    bf16-mixed with ``mode="params"`` (the default): bf16 parameters gathered and computed with, gradients reduced
    and kept in fp32, as torchtitan trains. ``mode="autocast"`` gathers the fp32 shards and lets autocast cast each
    weight as it is used: twice the bytes gathered and held per unit, kept as a named option for a model whose
    16-bit parameters misbehave."""
    if precision != "bf16-mixed" or mode == "autocast":
        return None
    from torch.distributed.fsdp import MixedPrecisionPolicy

    match_norm_inputs(model)
    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def scaler(precision: str, device: torch.device, *, native: bool = False) -> torch.amp.GradScaler | None:
    """fp16-mixed's loss scaler (its state is saved in checkpoints); None for every other precision, and for a
    method that scales inside its engine (``native``)."""
    return torch.amp.GradScaler(device.type) if precision == "fp16-mixed" and not native else None
