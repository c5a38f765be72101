"""Bytes a transformer's forward pass keeps for backward, per micro-batch.

Counted tensor by tensor from what autograd saves in a pre-norm decoder block with fused (flash-style) attention —
the kernel PyTorch's ``scaled_dot_product_attention`` uses on CPUs and recent GPUs, which keeps the output and a
log-sum-exp per head instead of the s×s score matrix. Korthikanti et al. (2022) count the same block at 34·s·b·h
bytes with dropout and unfused attention; without dropout masks and with fused attention it is the 16·s·b·h
elements below. ``tests/advise/test_calibration.py`` checks this against the bundled gpt's real forward pass.
"""

from __future__ import annotations

from paratrain.advise.models import Transformer

FP32 = 4
INDEX = 8  # token ids and targets are int64


def per_layer_bytes(arch: Transformer, batch: int, elem: int) -> int:
    """One block: two norm inputs, the attention input, q/k/v (k and v smaller under grouped-query attention),
    the attention output (the output projection reads it in place), the MLP input and its hidden activations
    (GELU: its input and output; SwiGLU: gate, its activation, up and their product)."""
    bs, h = batch * arch.seq_len, arch.hidden
    kv = (arch.kv_heads or arch.heads) / arch.heads
    hidden_acts = (4 if arch.mlp == "swiglu" else 2) * arch.ffn * arch.experts
    elements = bs * h * (2 + 1 + (1 + 2 * kv) + 1 + 1) + bs * hidden_acts
    norm_stats = bs * (2 if arch.norm == "layernorm" else 1) * 2  # mean and 1/std (or 1/rms) per norm, fp32
    lse = batch * arch.heads * arch.seq_len  # fused attention's log-sum-exp, fp32
    return int(elements * elem + (norm_stats + lse) * FP32)


def outside_layers_bytes(arch: Transformer, batch: int, elem: int) -> int:
    """Token ids and targets, the final norm's input and output, and the loss's log-softmax (fp32 even under
    mixed precision, where it is b·s·vocab and often the largest single tensor)."""
    bs = batch * arch.seq_len
    stats = bs * (2 if arch.norm == "layernorm" else 1)
    positions = arch.seq_len if arch.norm == "layernorm" else 0  # learned position ids (GPT-2 style)
    return int((2 * bs + positions) * INDEX + 2 * bs * arch.hidden * elem + (bs * arch.vocab + stats) * FP32)


def activation_bytes(arch: Transformer, batch: int, elem: int, *, checkpointing: bool = False) -> int:
    """The peak of what forward keeps for backward. Without checkpointing: every block's saved tensors and those
    outside the blocks, all alive when backward starts. With activation checkpointing only each block's input is
    kept; the peak is then the larger of the end of forward (the inputs and the tensors outside the blocks) and the
    recompute of the last block (the inputs, that block's full set and the gradient arriving at it — by then the
    loss's tensors are freed). Measured on the bundled gpt's real steps within 5 % either way
    (``tests/advise/test_calibration.py``)."""
    layer = per_layer_bytes(arch, batch, elem)
    outside = outside_layers_bytes(arch, batch, elem)
    if checkpointing:
        block_io = batch * arch.seq_len * arch.hidden * elem
        return arch.layers * block_io + max(outside, layer + block_io)
    return arch.layers * layer + outside
