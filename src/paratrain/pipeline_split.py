"""Cut a model into consecutive pipeline stages, in place, keeping every parameter's name.

A stage is the user's own module with the parts other stages hold removed, so its state dict keys are the
original ones (checkpoints load across every method) and nothing is traced or exported (any batch shape, dropout
and Python control flow keep working). The model's blocks (:func:`paratrain.blocks.transformer_blocks`, one
``nn.ModuleList``) are divided into contiguous runs, one per stage; the parameter-holding modules registered before
the list (embeddings) stay on the first stage only, those after it (final norm, output head) on the last only.

Which cut, first found:

1. ``model.pp_plan``, a function ``(model, stage, stages) -> nn.Module``: the user's own cut.
2. An ``nn.Sequential``: its layers, in order, are the blocks; the stage keeps its run.
3. A Hugging Face decoder (its config has ``base_model_pp_plan``: Llama, Mistral, Qwen2 and the decoders built
   like them): cut as above, and run by paratrain in the base model's own order: embeddings, rotary positions, the
   stage's layers, norm and head.
4. The model's own ``forward``, which must skip a part that is ``None`` (torchtitan's convention: ``x = self.tok(idx)
   if self.tok is not None else idx``). The bundled gpt does. A forward that calls a removed part is refused by the
   part's name when the stage first runs.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from paratrain.errors import ConfigError

PLAN_HINT = ("keep the blocks in one nn.ModuleList and skip None parts in forward, or set model.pp_plan = "
             "lambda model, stage, stages: <that stage's module> (docs/pipeline-parallel.md)")


class KeptBlocks(nn.Module):
    """The blocks one stage keeps, registered under their original indices (``blocks.4.…`` stays ``blocks.4.…``);
    iterates and slices like the ``nn.ModuleList`` it replaces."""

    def __init__(self, kept: dict[str, nn.Module]) -> None:
        super().__init__()
        for index, block in kept.items():
            self.add_module(index, block)

    def __iter__(self) -> Iterator[nn.Module]:
        return iter(self._modules.values())  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, item: slice) -> KeptBlocks:  # ``self.layers[: config.num_hidden_layers]`` in transformers
        return self


def _block_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    lists = [(name, m) for name, m in model.named_modules()
             if isinstance(m, nn.ModuleList) and any(True for _ in m.parameters())]
    if len(lists) != 1:
        what = ("no nn.ModuleList of blocks" if not lists
                else f"{len(lists)} lists of blocks ({', '.join(n for n, _ in lists)})")
        raise ConfigError(f"--strategy pp cannot cut {type(model).__name__} into stages: it has {what}", hint=PLAN_HINT)
    return lists[0]


def ranges(blocks: int, stages: int) -> list[range]:
    """Contiguous runs of blocks, as even as can be; the first stages take one more where they do not divide."""
    base, extra = divmod(blocks, stages)
    out, start = [], 0
    for stage in range(stages):
        size = base + (stage < extra)
        out.append(range(start, start + size))
        start += size
    return out


def _owns_params(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def prune(model: nn.Module, stage: int, stages: int) -> list[str]:
    """Remove from ``model`` what other stages hold; returns the names of the removed parts outside the blocks."""
    path, blocks = _block_list(model)
    if len(blocks) < stages:
        raise ConfigError(f"--strategy pp over {stages} stages needs at least {stages} blocks; "
                          f"{type(model).__name__} has {len(blocks)} in {path}",
                          hint=f"use at most {len(blocks)} processes")
    mine = ranges(len(blocks), stages)[stage]
    removed: list[str] = []
    parts = path.split(".")
    for depth in range(len(parts)):  # at each level above the block list: its siblings before and after it
        parent_name = ".".join(parts[:depth])
        parent = model.get_submodule(parent_name)
        names = list(parent._modules)
        at = names.index(parts[depth])
        for i, name in enumerate(names):
            child = parent._modules[name]
            if i == at or child is None or not _owns_params(child):
                continue  # parameter-free parts (rotary positions) are cheap and every stage may need them
            keep = stage == 0 if i < at else stage == stages - 1
            if not keep:
                setattr(parent, name, None)
                removed.append(f"{parent_name}.{name}" if parent_name else name)
    owner = model.get_submodule(".".join(parts[:-1]))
    setattr(owner, parts[-1], KeptBlocks({str(i): blocks[i] for i in mine}))
    return removed


def prune_sequential(model: nn.Sequential, stage: int, stages: int) -> None:
    """An ``nn.Sequential`` is its own pipeline: its layers, in order, are divided into contiguous runs; the stage
    keeps its run under the original indices (``2.weight`` stays ``2.weight``)."""
    if len(model) < stages:
        raise ConfigError(f"--strategy pp over {stages} stages needs at least {stages} layers; this nn.Sequential "
                          f"has {len(model)}", hint=f"use at most {len(model)} processes")
    mine = ranges(len(model), stages)[stage]
    for i, name in enumerate(list(model._modules)):
        if i not in mine:
            del model._modules[name]


def _hf_stage_forward(model: nn.Module, first: bool, last: bool) -> Callable[..., torch.Tensor]:
    """A Hugging Face decoder's forward for one stage, in its base model's own order (training: no cache, no
    padding mask): token ids in on the first stage, hidden states between stages, logits out of the last."""
    base = model.base_model
    create_mask = getattr(sys.modules[type(base).__module__], "create_causal_mask", None)

    def forward(self: nn.Module, x: torch.Tensor, *more: Any, **named: Any) -> torch.Tensor:
        if more or any(v is not None for v in named.values()):
            raise ConfigError("--strategy pp runs a Hugging Face decoder on token ids alone: only one tensor passes "
                              "between stages, so a padding mask (attention_mask) or other inputs cannot reach them",
                              hint="train on unpadded (packed) sequences under pp, or use fsdp or tp")
        hidden = base.embed_tokens(x) if first else x
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        mask = create_mask(config=base.config, inputs_embeds=hidden, attention_mask=None, cache=None,
                           position_ids=positions) if create_mask is not None else None
        rotary = base.rotary_emb(hidden, position_ids=positions) if getattr(base, "rotary_emb", None) else None
        for layer in base.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rotary, position_ids=positions)
        if last:
            hidden = model.lm_head(base.norm(hidden))
        return hidden

    return types.MethodType(forward, model)


def _check_untied(model: nn.Module) -> None:
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False):
        raise ConfigError(f"--strategy pp cannot cut {type(model).__name__}: its output head shares the input "
                          "embedding's weight (tie_word_embeddings), and the two sit on the first and last stages",
                          hint="set config.tie_word_embeddings = False before building the model, or use fsdp")


def _tied(model: nn.Module) -> list[list[str]]:
    """The names of each parameter that several modules share (an output head tied to the embedding)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def _check_ties_kept(model: nn.Module, stage_model: nn.Module, tied: list[list[str]], stage: int) -> None:
    """A stage must hold every use of a shared parameter or none: split over two stages, each would train its own
    copy, a different model than one process trains, and nothing would say so."""
    kept = {name for name, _ in stage_model.named_parameters(remove_duplicate=False)}
    for group in tied:
        inside = [name for name in group if name in kept]
        if inside and len(inside) < len(group):
            outside = next(name for name in group if name not in kept)
            raise ConfigError(f"--strategy pp cannot cut {type(model).__name__}: {inside[0]} and {outside} are one "
                              f"tensor (tied), and stage {stage} would hold only one of them",
                              hint="untie them before building the model, or use fsdp")


def stage_module(model: nn.Module, stage: int, stages: int) -> tuple[nn.Module, list[str]]:
    """This rank's stage of ``model`` (the same object, cut in place, unless the user's plan returns another) and the
    parts it no longer holds."""
    tied = _tied(model)
    made, removed = _cut(model, stage, stages)
    _check_ties_kept(model, made, tied, stage)
    return made, removed


def _cut(model: nn.Module, stage: int, stages: int) -> tuple[nn.Module, list[str]]:
    plan = getattr(model, "pp_plan", None)
    if callable(plan):
        made = plan(model, stage, stages)
        if not isinstance(made, nn.Module):
            raise ConfigError(f"model.pp_plan returned a {type(made).__name__} for stage {stage}, not an nn.Module",
                              hint=PLAN_HINT)
        return made, []
    if isinstance(model, nn.Sequential):
        prune_sequential(model, stage, stages)
        return model, []
    hf = getattr(getattr(model, "config", None), "base_model_pp_plan", None)
    if hf:
        _check_untied(model)
    removed = prune(model, stage, stages)
    if hf:
        model.forward = _hf_stage_forward(model, stage == 0, stage == stages - 1)  # type: ignore[method-assign]
    return model, removed


def missing_part(exc: BaseException, removed: list[str]) -> str | None:
    """Which removed part a stage's failed forward called, when that is why it failed (a forward that does not
    skip None parts: "'NoneType' object is not callable")."""
    if isinstance(exc, TypeError) and "NoneType" in str(exc) and removed:
        return ", ".join(removed)
    return None
