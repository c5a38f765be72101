"""What ``advise --model`` names, as something :mod:`paratrain.advise.simulate` can build under the fake mode and
train one step: a module factory, a batch of the right shape and kind, and the loss.

The same names as :func:`paratrain.advise.models.resolve`: a bundled workload (its own loss), a Hugging Face config
(``hf:``: transformers' module and a next-token loss), a preset (its published architecture as a transformers
config: Llama-shaped presets as a ``LlamaConfig``, GPT-2's as a ``GPT2Config``), and ``package.module:factory``
returning ``(module, example_inputs)`` (the example's batch is scaled to the micro-batch along its first dimension,
and the loss is the output's sum, as no target is known). ``--params`` alone names no module: nothing to run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paratrain.errors import ConfigError


@dataclass(frozen=True)
class Trainable:
    """``build()`` makes the module (called under the fake mode: nothing is allocated); ``batch(n, seq)`` makes
    ``(inputs, targets)`` for ``n`` samples (``seq``: the sequence length, None for the model's own); ``loss(output,
    targets)`` is what backward starts from."""

    name: str
    build: Callable[[], Any]
    batch: Callable[[int, int | None], tuple[tuple[Any, ...], Any]]
    loss: Callable[[Any, Any], Any]


def next_token_loss(output: Any, targets: Any) -> Any:
    """Cross-entropy of a causal language model's logits (a transformers output or the bare tensor), as the bundled
    workloads train."""
    from paratrain.workloads import gpt

    return gpt._loss(output.logits if hasattr(output, "logits") else output, targets)


def _token_batch(vocab: int, default_seq: int) -> Callable[[int, int | None], tuple[tuple[Any, ...], Any]]:
    def batch(n: int, seq: int | None) -> tuple[tuple[Any, ...], Any]:
        import torch

        length = seq or default_seq
        return (torch.randint(0, vocab, (n, length)),), torch.randint(0, vocab, (n, length))

    return batch


def _context(config: Any) -> int:
    """The config's longest context: the sequence length advise's formula uses when --seq-len is not given."""
    return getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 2048


def _causal_lm(name: str, config: Any, seq: int) -> Trainable:
    from paratrain.workloads import hf_config

    config.use_cache = False  # training: no key/value cache, as the llama workload and checkpointing set it
    return Trainable(name, lambda: hf_config.causal_lm(config), _token_batch(config.vocab_size, seq), next_token_loss)


def preset_config(name: str) -> Any:
    """A transformers config of the preset's published architecture."""
    from paratrain.advise.models import PRESETS
    from paratrain.workloads import hf_config

    arch, kind, _ = PRESETS[name.lower()]
    transformers = hf_config.transformers_module()
    if arch.mlp == "swiglu":
        return transformers.LlamaConfig(vocab_size=arch.vocab, hidden_size=arch.hidden, intermediate_size=arch.ffn,
                                        num_hidden_layers=arch.layers, num_attention_heads=arch.heads,
                                        num_key_value_heads=arch.kv_heads or arch.heads,
                                        max_position_embeddings=arch.seq_len, tie_word_embeddings=kind["tied"],
                                        use_cache=False)
    return transformers.GPT2Config(vocab_size=arch.vocab, n_embd=arch.hidden, n_layer=arch.layers, n_head=arch.heads,
                                   n_positions=arch.seq_len, n_inner=arch.ffn, use_cache=False)


def _bundled(name: str, width: int | None, depth: int | None) -> Trainable:
    from paratrain.workloads import get
    from paratrain.workloads.gpt import SEQ_LEN, char_ids

    kwargs = {k: v for k, v in (("width", width), ("depth", depth)) if v is not None}
    if name not in ("gpt", "llama"):
        raise ConfigError(f"the {name} workload is not simulated: its batches are images, not tokens",
                          hint="simulate gpt or llama, or your own model (package.module:factory)")
    _, vocab = char_ids()
    built = get(name).build

    def build() -> Any:
        return built(**kwargs).model

    return Trainable(f"{name} workload", build, _token_batch(vocab, SEQ_LEN), next_token_loss)


def _factory(target: str) -> Trainable:
    from paratrain.advise import models

    module_name, _, attr = target.partition(":")
    with models._current_folder_importable():
        factory = models._import_factory(target, module_name, attr)
    made: dict[str, Any] = {}

    def build() -> Any:
        with models._current_folder_importable():
            out = factory()
        if not isinstance(out, tuple):
            raise ConfigError(f'--model "{target}" returned a module without example inputs: a step cannot be run',
                              hint="return (module, example_inputs) from the factory to simulate it")
        module, example = out[0], out[1]
        made["example"] = tuple(example) if isinstance(example, (tuple, list)) else (example,)
        return module

    def batch(n: int, _seq: int | None) -> tuple[tuple[Any, ...], Any]:
        import torch

        example = made["example"]
        scaled = tuple(x.repeat_interleave(max(1, n // x.shape[0]), 0)[:n] if isinstance(x, torch.Tensor) and x.dim()
                       else x for x in example)
        return scaled, None

    def loss(output: Any, _targets: Any) -> Any:
        import torch
        from torch.utils._pytree import tree_leaves

        leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        return sum(t.float().sum() for t in leaves)

    return Trainable(target, build, batch, loss)


def trainable(model: str | None, width: int | None = None, depth: int | None = None) -> Trainable:
    """What ``--model`` names, ready to simulate; a ConfigError saying why not (``--params`` alone, an image
    workload, a factory without example inputs)."""
    from paratrain.advise.models import BUNDLED, PRESETS

    if model is None:
        raise ConfigError("--simulate runs the model: give it with --model (a parameter count has no code to run)",
                          hint="e.g. --model llama3.1-8b, hf:PATH/config.json or package.module:factory")
    if model.lower() in PRESETS:
        config = preset_config(model)
        return _causal_lm(model.lower(), config, _context(config))
    if model in BUNDLED:
        return _bundled(model, width, depth)
    if model.startswith("hf:"):
        from paratrain.workloads import hf_config

        config = hf_config.load(model, width, depth)
        return _causal_lm(model, config, _context(config))
    if ":" in model:
        return _factory(model)
    raise ConfigError(f'--simulate cannot run "{model}"')
