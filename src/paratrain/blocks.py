"""A model's transformer blocks, found one way for every method: each element of an ``nn.ModuleList`` that has
parameters (``model.blocks``, ``encoder.layers``, Hugging Face's ``model.layers``). FSDP shards them one by one;
activation checkpointing keeps only their inputs for backward.

Activation checkpointing uses torch's composable ``checkpoint`` (non-reentrant, RNG state preserved): a hook on the
block rather than a wrapper module, so parameter names — and therefore checkpoints, state dicts and every method's
wrapping — stay exactly the user's. The modes (paratrain/ac_modes.py) choose which blocks get the hook and, for
``op``, what the hook keeps: torch's selective checkpointing (``create_selective_checkpoint_contexts``) with
torchtitan's per-op policy, passed to the same hook as its ``context_fn``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from paratrain import ac_modes
from paratrain.errors import ConfigError


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    found: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            found.extend(block for block in module if any(True for _ in block.parameters()))
    return found


def checkpoint_activations(model: nn.Module, mode: ac_modes.Mode = "full") -> int:
    """Checkpoint the blocks of ``model`` that ``mode`` names (all for full and op, every N-th for every:N);
    returns how many. A model without blocks, or an every:N that would pick none of them, is one clear error, not a
    flag that silently does nothing."""
    from torch.distributed._composable import checkpoint

    mode = ac_modes.parse(mode)
    blocks = transformer_blocks(model)
    if not blocks:
        raise ConfigError(f"activation checkpointing works per transformer block, and {type(model).__name__} keeps "
                          "none in an nn.ModuleList",
                          hint="keep the blocks in an nn.ModuleList (self.blocks = nn.ModuleList(...)), or drop "
                               "--activation-checkpointing")
    chosen = ac_modes.checkpointed(mode, len(blocks))
    if not any(chosen):
        raise ConfigError(f"activation checkpointing {ac_modes.name(mode)} checkpoints none of "
                          f"{type(model).__name__}'s {len(blocks)} blocks",
                          hint=f"use every:N with N at most {len(blocks)}, or full")
    options: dict[str, Any] = {"context_fn": selective_context} if mode == "op" else {}
    for block, on in zip(blocks, chosen, strict=True):
        if on:
            checkpoint(block, **options)
    _stop_kv_cache(model)
    return sum(chosen)


def checkpointed_notice(mode: ac_modes.Mode, count: int) -> str:
    """The one line the Session prints: which blocks keep what (full's words unchanged since before modes)."""
    mode = ac_modes.parse(mode)
    if mode == "op":
        return (f"activation checkpointing (op): {count} block(s) keep their inputs and the outputs of attention and "
                "of every other matrix multiply for backward")
    if mode == "full":
        return f"activation checkpointing: {count} block(s) keep only their inputs for backward"
    return f"activation checkpointing ({ac_modes.name(mode)}): {count} block(s) keep only their inputs for backward"


def _ops(*names: str, namespace: Any = None) -> frozenset[Any]:
    """The ATen ops of those names that this torch has (the fused attention kernels vary by version and device)."""
    where = namespace if namespace is not None else torch.ops.aten
    found = []
    for full in names:
        op, _, overload = full.partition(".")
        packet = getattr(where, op, None)
        if packet is not None and hasattr(packet, overload):
            found.append(getattr(packet, overload))
    return frozenset(found)


@functools.cache
def _saved_ops() -> tuple[frozenset[Any], frozenset[Any]]:
    """(matrix multiplies, other ops whose outputs are kept) under the ``op`` mode. torchtitan's list: ``mm``, every
    fused attention kernel, the reduce-scatter of sequence/tensor parallelism and ``max`` (float8's amax). ``addmm``
    joins the multiplies here: it is ``nn.Linear`` with a bias on a contiguous input (a GPT's layers), the same cost
    as ``mm``; and the CPU's flash kernel joins the attention kernels, so the mode means the same on every device."""
    matmuls = _ops("mm.default", "addmm.default")
    kept = _ops("_scaled_dot_product_flash_attention.default", "_scaled_dot_product_efficient_attention.default",
                "_scaled_dot_product_cudnn_attention.default", "_scaled_dot_product_flash_attention_for_cpu.default",
                "max.default")
    functional = getattr(torch.ops, "_c10d_functional", None)
    if functional is not None:
        kept |= _ops("reduce_scatter_tensor.default", namespace=functional)
    return matmuls, kept


def _pass_profiler_ranges() -> None:
    """Let selective checkpointing pass over profiler ranges (``record_function``) instead of replaying them. Torch's
    selective checkpoint stores every op of a block's forward and requires its recompute to meet the same ops; fsdp's
    hooks, which torch puts before a block's checkpoint hook, open a profiler range that falls outside the block's
    forward and inside its recompute ("profiler._record_function_enter_new.default encountered during backward but
    not found in storage"). A range computes nothing, so it is added to ``SAC_IGNORED_OPS``, the set torch exports
    for ops its selective checkpoint lets through (as it does ``detach``)."""
    from torch.utils import checkpoint

    profiler = torch.ops.profiler
    checkpoint.SAC_IGNORED_OPS.update({profiler._record_function_enter_new.default,
                                       profiler._record_function_exit._RecordFunction})


def selective_context() -> Any:
    """The ``context_fn`` of one block's checkpoint under the ``op`` mode, made afresh for each forward of the block:
    keep the outputs of the attention kernels and reductions, and of every other matrix multiply (the 1st, 3rd, …
    — torchtitan's compromise: keeping all of them costs nearly what storing the block does); recompute the rest.
    The multiplies are counted per pass: older torch asks the policy during the recompute too."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    _pass_profiler_ranges()
    matmuls, kept = _saved_ops()
    counts = {False: 0, True: 0}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if op in matmuls:
            recompute = bool(getattr(ctx, "is_recompute", False))
            counts[recompute] += 1
            keep = counts[recompute] % 2 == 1
        else:
            keep = op in kept
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def _stop_kv_cache(model: nn.Module) -> None:
    """A Hugging Face model fills a key/value cache in training too when its config says ``use_cache`` (the default),
    and each block's recompute appends that block's keys and values to it again, kept until backward ends: 12 MiB more
    per block on a 24 M parameter llama, half again the checkpointed peak. transformers turns the cache off under its
    own gradient checkpointing for the same reason; so does ours."""
    config = getattr(model, "config", None)
    if getattr(config, "use_cache", False):
        config.use_cache = False
