"""torch's fused Transformer inference kernels ("fast path") where a method or a precision cannot serve them.

In eval mode without gradients, ``nn.TransformerEncoder`` packs a padded batch into a nested tensor (dropping the
padding) and its layers run ``torch._transformer_encoder_layer_fwd``; ``nn.MultiheadAttention`` has a fused path
too. Two conditions those kernels need are checked by torch in a way that misses paratrain's methods:

- **Module hooks.** The encoder packs the nested tensor without looking for hooks; a layer with a hooked
  submodule then gives up its fused kernel (the hooks must run) and hands the nested tensor to its
  ``MultiheadAttention``, which accepts one only on its own fast path, and that needs query, key and value to be
  the same tensor object. DeepSpeed ZeRO-3 hooks every module to gather its parameters, and its pre-hook hands the
  attention new tensor objects — so the attention refused ("MultiheadAttention does not support NestedTensor
  outside of its fast path. … query, key, and value are not the same Tensor") at the first evaluation.
  :func:`turn_off_nested_tensor` turns the packing off (``use_nested_tensor``) on exactly the encoders whose
  attention modules carry hooks, so evaluation takes the ordinary, padded path. (FSDP hooks only its units, the
  layers: their attention keeps its fast path, and the nested tensor works there.)
- **CPU autocast.** torch skips the kernels "when autocast is enabled", but asks ``torch.is_autocast_enabled()``,
  which only sees CUDA's autocast; under CPU autocast the kernels then get mixed bf16/fp32 tensors and fail.
  :func:`without_fastpath` turns them off for the duration of an autocast forward, as CUDA autocast already does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def without_fastpath() -> Iterator[None]:
    """The ordinary (autocast-aware) Transformer/attention path inside the block. torch's switch is process-wide,
    so it is restored afterwards."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def _attention_hooked(layer: torch.nn.Module) -> bool:
    """A forward (pre-)hook on the layer's attention: it may hand the attention other tensor objects, and it makes
    the layer give up its own fused kernel (which checks for hooks on every submodule)."""
    attention = getattr(layer, "self_attn", None)
    return attention is not None and bool(attention._forward_hooks or attention._forward_pre_hooks)


def turn_off_nested_tensor(model: torch.nn.Module) -> list[str]:
    """Turn off nested-tensor packing on every ``nn.TransformerEncoder`` whose layers' attention carries hooks;
    returns their names (``""`` for the model itself). Call it after the method has wrapped the model (its hooks
    are in place by then)."""
    names = []
    for name, module in model.named_modules():
        if (isinstance(module, torch.nn.TransformerEncoder) and getattr(module, "use_nested_tensor", False)
                and any(_attention_hooked(layer) for layer in module.layers)):
            module.use_nested_tensor = False
            names.append(name)
    return names


def turned_off_notice(method: str, names: list[str]) -> str:
    """The one line that says where :func:`turn_off_nested_tensor` acted, and why."""
    return (f"{method} hooks the attention in {', '.join(n or 'the model' for n in names)} (nn.TransformerEncoder), "
            "which then cannot take torch's nested-tensor fast path: turned nested tensors off there "
            "(use_nested_tensor=False); evaluation takes the ordinary padded path")
