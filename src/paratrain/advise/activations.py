"""Bytes a transformer's forward pass keeps for backward, per micro-batch.

Counted tensor by tensor from what autograd saves in a pre-norm decoder block with fused (flash-style) attention —
the kernel PyTorch's ``scaled_dot_product_attention`` uses on CPUs and recent GPUs, which keeps the output and a
log-sum-exp per head instead of the s×s score matrix. Korthikanti et al. (2022) count the same block at 34·s·b·h
bytes with dropout and unfused attention; without dropout masks and with fused attention it is the 16·s·b·h
elements below, plus what Hugging Face's RMSNorm keeps. ``tests/advise/test_calibration.py`` checks this against
the bundled gpt's and llama's real steps.

Mixed precision (autocast over fp32 weights: paratrain's bf16-mixed and fp16-mixed under every method) is not
"everything in 16 bits": the embeddings and every residual add stay fp32, so each norm keeps an fp32 input; each
matrix multiply saves its own 16-bit copy of its input (Llama's q, k and v projections three copies of one tensor)
and of its weight. Counted the same way, within 6 % of the bundled models' real steps under autocast, where
counting every tensor at 2 bytes was 20-37 % low.
"""

from __future__ import annotations

from dataclasses import dataclass

from paratrain import ac_modes
from paratrain.advise.models import Transformer

FP32 = 4
INDEX = 8  # token ids and targets are int64


def norm_bytes_per_element(arch: Transformer, elem: int) -> int:
    """What one norm keeps for backward beyond its statistics, per element of its input. A LayerNorm is one fused op
    that keeps its input. An RMSNorm is written out op by op in every Hugging Face decoder (Llama's ``LlamaRMSNorm``):
    it keeps its input, cast to fp32 whatever the model's precision, and the normalized tensor it multiplies the
    weight by — 80 MiB per block measured on a 24 M llama, not the 72 MiB that counting its input alone gives."""
    return elem if arch.norm == "layernorm" else FP32 + elem


def per_layer_bytes(arch: Transformer, batch: int, elem: int, tp: int = 1) -> int:
    """One block: what its two norms keep, the attention input, q/k/v (k and v smaller under grouped-query
    attention), the attention output (the output projection reads it in place), the MLP input and its hidden
    activations (GELU: its input and output; SwiGLU: gate, its activation, up and their product). Under tensor
    parallelism over ``tp`` ranks, q/k/v, the attention output, the log-sum-exp and the MLP's hidden activations are
    each rank's heads and units alone; the norms and the split layers' inputs are whole on every rank."""
    bs, h = batch * arch.seq_len, arch.hidden
    kv = (arch.kv_heads or arch.heads) / arch.heads
    hidden_acts = (4 if arch.mlp == "swiglu" else 2) * arch.ffn * arch.experts
    elements = bs * h * (1 + 1) + (bs * h * ((1 + 2 * kv) + 1) + bs * hidden_acts) / tp
    norms = 2 * bs * h * norm_bytes_per_element(arch, elem)
    norm_stats = bs * (2 if arch.norm == "layernorm" else 1) * 2  # mean and 1/std (or 1/rms) per norm, fp32
    lse = batch * arch.heads * arch.seq_len / tp  # fused attention's log-sum-exp, fp32
    return int(elements * elem + norms + (norm_stats + lse) * FP32)


def outside_layers_bytes(arch: Transformer, batch: int, elem: int) -> int:
    """Token ids and targets, what the final norm keeps, the output layer's input, and the loss's log-softmax (fp32
    even under mixed precision, where it is b·s·vocab and often the largest single tensor)."""
    bs = batch * arch.seq_len
    stats = bs * (2 if arch.norm == "layernorm" else 1)
    positions = arch.seq_len if arch.norm == "layernorm" else 0  # learned position ids (GPT-2 style)
    final_norm = bs * arch.hidden * (norm_bytes_per_element(arch, elem) + elem)
    return int((2 * bs + positions) * INDEX + final_norm + (bs * arch.vocab + stats) * FP32)


def loss_backward_bytes(arch: Transformer, batch: int) -> int:
    """What the loss's backward adds at the start of backward, beside the log-softmax output it kept (counted in
    :func:`outside_layers_bytes`): the gradient arriving at the log-softmax and the one it makes for the logits, each
    b·s·vocab in fp32. With a large vocabulary this is the step's peak: Llama 3's 128k tokens at 16k tokens per rank
    make it 15.7 GiB, measured as three fp32 copies of the logits on a 32k-vocabulary llama
    (``tests/advise/test_calibration.py``)."""
    return 2 * batch * arch.seq_len * arch.vocab * FP32


def backward_gradient_bytes(arch: Transformer, batch: int, elem: int, tp: int = 1) -> int:
    """What a block's backward adds for a moment on top of what it kept: the gradients of the MLP's hidden
    activations, alive together while backward passes through it (GELU: one; SwiGLU: the gate's and up's)."""
    return (2 if arch.mlp == "swiglu" else 1) * batch * arch.seq_len * arch.ffn * arch.experts * elem // tp


def autocast_extra_bytes(arch: Transformer, batch: int, tp: int = 1) -> tuple[int, int, int]:
    """What autocast over fp32 weights keeps beyond counting every tensor at 2 bytes: (per block, outside the
    blocks, one block's weight copies). Per block: the norms' inputs are fp32 (the residual stream is), and a
    Llama-style block (RMSNorm: separate q, k, v projections, a gate and an up matrix) casts its attention input three
    times and its MLP input twice, where one 2-byte copy was counted. Outside: the output layer's 16-bit input copy.
    Weights: every matrix multiply saves the 16-bit copy of its weight that it computed with, alive until its backward
    — with or without autocast's cache, and of the whole weight under FSDP (of each rank's slice under tensor
    parallelism, ``tp`` ranks)."""
    bs, h = batch * arch.seq_len, arch.hidden
    norms = 2 * bs * h * (norm_bytes_per_element(arch, FP32) - norm_bytes_per_element(arch, 2))
    casts = (3 if arch.norm == "rmsnorm" else 0) * bs * h * 2
    attention, mlp = arch.block_matrices()
    return norms + casts, bs * h * 2, 2 * (attention + mlp * arch.experts) // tp


def selective_bytes(arch: Transformer, batch: int, elem: int, tp: int = 1) -> int:
    """What one block keeps under selective (``op``) checkpointing beyond its input: the outputs of every other
    matrix multiply in forward order (the 1st, 3rd, …; paratrain/blocks.py's policy, torchtitan's) and of the fused
    attention (its output and fp32 log-sum-exp). A GPT-style block (LayerNorm) multiplies by a fused q/k/v matrix,
    the output projection and the MLP's two matrices, so it keeps q/k/v and the MLP's hidden layer; a Llama-style
    block (RMSNorm) by q, k, v, the output projection, gate, up and down, so it keeps q, v, gate and down. Under
    tensor parallelism the column-split layers' outputs and the attention are each rank's share; the row-split
    layers' (the output projection, down) are whole."""
    bs, h, kv = batch * arch.seq_len, arch.hidden, arch.kv_width
    if arch.norm == "rmsnorm":
        attention = [h / tp, kv / tp, kv / tp, h]
        mlp = [arch.ffn / tp, arch.ffn / tp, h] if arch.mlp == "swiglu" else [arch.ffn / tp, h]
    else:
        attention = [(h + 2 * kv) / tp, h]
        mlp = [arch.ffn / tp, arch.ffn / tp, h] if arch.mlp == "swiglu" else [arch.ffn / tp, h]
    outputs = attention + mlp * arch.experts
    matmuls = sum(outputs[0::2])
    lse = batch * arch.heads * arch.seq_len / tp
    return int(bs * (matmuls + h / tp) * elem + lse * FP32)


@dataclass(frozen=True)
class Units:
    """What FSDP holds beside the activations, moment by moment, as backward walks its units (one per block, and the
    root: the embeddings, final norm and output layer). Why per moment: at the start of backward, where the
    activations peak, FSDP holds fewer units than in the middle of it (no reduce-scatter of a block before, no
    prefetch past the first block); counting its busiest set beside the activations' peak put FSDP on the bundled
    llama ×4 10-15 % high. Bytes: ``gathered`` one block's parameters gathered, in the compute dtype; ``grads`` one
    block's unsharded gradients, made while it runs; ``reduce`` the reduce-scatter input (fp32) of the block before,
    kept until that reduce-scatter is done (torch.distributed.fsdp's foreach_reduce); ``root`` the root's gathered
    parameters (FSDP2 never reshards the root after forward: backward needs them first); ``root_grads`` the output
    layer's unsharded gradients, made first in backward and reduced with the root's at its end. ``kept``: every
    block stays gathered from its forward until its backward (reshard_after_forward=False: shard=grad_op, none).
    ``ahead``: blocks already gathered for backward while the loss's backward runs. On a GPU the CPU issues work
    ahead of the device, and FSDP lets two all-gathers be in flight, so the first two blocks of backward are
    gathered then; on a CPU nothing runs ahead."""

    gathered: int = 0
    grads: int = 0
    reduce: int = 0
    root: int = 0
    root_grads: int = 0
    kept: bool = False
    ahead: int = 0

    def at_start_of_backward(self, layers: int) -> int:
        return self.root + self.gathered * (layers if self.kept else min(self.ahead, layers))

    def at_block(self, i: int, layers: int) -> int:
        """During block ``i``'s backward (backward runs ``layers - 1`` down to 0): the block and the next one
        prefetched (or, kept, every block backward has not reached), its gradients, the block before's reduction."""
        gathered = i + 1 if self.kept else min(i + 1, 2)
        return self.root + self.root_grads + gathered * self.gathered + self.grads + \
            (self.reduce if i < layers - 1 else 0)


def activation_bytes(arch: Transformer, batch: int, elem: int, *, checkpointing: ac_modes.Mode = False,
                     autocast: bool = False, tp: int = 1, alongside: int = 0) -> int:
    """The activations' peak: :func:`activation_peak` with every gradient counted as alive."""
    return activation_peak(arch, batch, elem, checkpointing=checkpointing, autocast=autocast, tp=tp,
                           alongside=alongside)[0]


def activation_peak(arch: Transformer, batch: int, elem: int, *, checkpointing: ac_modes.Mode = False,
                    autocast: bool = False, tp: int = 1, alongside: int = 0,
                    grads: tuple[int, int] = (0, 0), units: Units | None = None) -> tuple[int, int, int]:
    """The peak of what forward keeps for backward, under each checkpointing mode (paratrain/ac_modes.py). A block
    stored whole keeps all its saved tensors; a block checkpointed keeps its input (and under ``op`` what
    :func:`selective_bytes` counts), and during backward recomputes its full set, which then lives beside the
    gradient arriving at it and its backward gradients (the ``op`` outputs it kept are part of that set, handed
    over, not copied). The peak is the larger of the end of forward (every block's share, the tensors outside the
    blocks) and each block's backward (its share and those of the blocks before it, which backward has not reached).
    Without checkpointing this is every block's saved tensors and the larger of the tensors outside the blocks and
    the last block's backward gradients; with full checkpointing, the inputs and the larger of the tensors outside
    the blocks and the last block's recompute. Measured within 10 % on the bundled gpt's and llama's real steps in
    every mode (``tests/advise/test_calibration.py``). ``autocast``: 16-bit compute over fp32 weights (``elem`` 2),
    whose block inputs are fp32 and whose matrix multiplies keep 16-bit copies (:func:`autocast_extra_bytes`).
    ``tp``: the blocks split over that many ranks by tensor parallelism (each rank's share; outside the blocks all is
    whole). ``alongside``: how many other micro-batches of ``batch`` samples hold what their forward kept while this
    one runs (a pipeline stage's in-flight micro-batches): each holds its end-of-forward set, its own 16-bit weight
    copies included (autocast runs, and clears its cache, once per micro-batch's forward). ``grads``: (one block's,
    the output layer's) gradient bytes that backward makes as it reaches them — gradients set to None between steps,
    as the Session does, under a method that keeps them per tensor: the state counts them whole, but at each moment
    only those backward has made are alive. Counting the start of backward, when no gradient exists yet, with every
    gradient beside it put DDP ×2 on the bundled llama 7–12 % high, as much as its fp32 gradients. ``units``: what
    FSDP holds at each moment (:class:`Units`), counted into the moment and returned apart; FSDP's (sharded)
    gradients are made by each block's reduce-scatter as its backward ends, the output layer's with the root's at
    the very end. Returns (the activations, the gradients not made yet, FSDP's units) at the moment the three
    together peak."""
    mode = ac_modes.parse(checkpointing)
    layer = per_layer_bytes(arch, batch, elem, tp)
    outside = outside_layers_bytes(arch, batch, elem)
    gradients = backward_gradient_bytes(arch, batch, elem, tp)
    block_io = batch * arch.seq_len * arch.hidden * (FP32 if autocast else elem)
    weights = head = 0
    if autocast:
        extra_layer, extra_outside, weights = autocast_extra_bytes(arch, batch, tp)
        layer, outside, head = layer + extra_layer, outside + extra_outside, 2 * arch.vocab * arch.hidden
    kept_checkpointed = block_io + (selective_bytes(arch, batch, elem, tp) if mode == "op" else 0)
    checkpointed = ac_modes.checkpointed(mode, arch.layers)
    kept = [kept_checkpointed if c else layer + weights for c in checkpointed]
    others = alongside * (sum(kept) + outside + head)
    block_grads, head_grads = grads
    layers = len(checkpointed)
    made = 0 if units else head_grads  # the output layer's come first in backward (under FSDP: last, with the root)
    moments = [(sum(kept) + outside + head + loss_backward_bytes(arch, batch), 0,
                units.at_start_of_backward(layers) if units else 0)]  # the start of backward
    for i in reversed(range(layers)):  # each block's backward, the blocks before it still holding theirs
        if not units:
            made += block_grads  # its own, made while it runs
        working = block_io + layer + weights + block_io if checkpointed[i] else layer + weights + head
        moments.append((sum(kept[:i]) + working + gradients, made, units.at_block(i, layers) if units else 0))
        if units:
            made += block_grads  # FSDP's: by the block's reduce-scatter, as its backward ends
    held, made_then, held_units = max(moments, key=sum)
    total_made = made + (head_grads if units else 0)
    return held + others, total_made - made_then, held_units
