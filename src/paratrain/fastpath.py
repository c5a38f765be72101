"""torch's fused Transformer inference kernels ("fast path") where a method or a precision cannot serve them.

In eval mode without gradients, ``nn.TransformerEncoder`` packs a padded batch into a nested tensor (dropping the
padding) and its layers run ``torch._transformer_encoder_layer_fwd``; ``nn.MultiheadAttention`` has a fused path
too. A condition those kernels need is checked by torch in a way that misses paratrain's precisions:

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

