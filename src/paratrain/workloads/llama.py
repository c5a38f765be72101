"""``llama``: a Hugging Face transformers Llama (grouped-query attention, rotary positions, RMSNorm, SwiGLU) trained
on the characters of the gpt workload's bundled text; and any local config (``hf:PATH``) trained the same way.

Why transformers' own model and not a copy: it is what users train, and it carries the traps a hand-written model
does not (rotary tables outside the state dict, ``ModelOutput`` returns, kwargs-only decoder layers). The default is
tiny (no download, a few seconds on a CPU); ``--width``/``--depth`` size it up.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Any

import torch
from torch.utils.data import Subset

from paratrain.errors import ConfigError
from paratrain.workloads import gpt, hf_config
from paratrain.workloads.base import Built, Init, Workload

HEADS, KV_HEADS = 4, 2  # grouped-query attention: two query heads share each key/value head


def tiny_config(vocab: int, width: int = 64, depth: int = 2) -> Any:
    """A Llama 3-shaped config at toy size: the feed-forward width Llama's rule gives (8/3 of the model width,
    rounded up to a multiple of 64), untied embeddings, no dropout."""
    if width % HEADS:
        raise ConfigError(f"llama width {width} must be a multiple of {HEADS} (attention heads)")
    if depth < 1:
        raise ConfigError(f"--depth {depth} must be at least 1")
    transformers = hf_config.transformers_module()
    return transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=width, intermediate_size=64 * math.ceil(8 * width / 3 / 64),
        num_hidden_layers=depth, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        max_position_embeddings=gpt.SEQ_LEN, tie_word_embeddings=False, attention_dropout=0.0)


def _logits(output: Any) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output


def _loss(output: Any, target: torch.Tensor) -> torch.Tensor:
    return gpt._loss(_logits(output), target)


def _nll(output: Any, target: torch.Tensor) -> dict[str, float]:
    return gpt._nll(_logits(output), target)


def build_from(config_of: Any, seed: int = 0, init: Init = nullcontext) -> Built:
    """The model ``config_of(vocab)`` describes, on the bundled text. Token ids are the text's characters, so any
    vocabulary at least that large works (a real config's 128k rows are trained like any other)."""
    ids, vocab = gpt.char_ids()
    config = config_of(vocab)
    if config.vocab_size < vocab:
        raise ConfigError(f"the config's vocabulary ({config.vocab_size}) is smaller than the bundled text's "
                          f"{vocab} characters", hint="use a config with vocab_size of at least that")
    config.use_cache = False  # a key/value cache serves generation; in training it only holds memory
    split = int(len(ids) * 0.9)
    torch.manual_seed(seed)
    with init():
        model = hf_config.causal_lm(config)
    test = gpt.CharWindows(ids[split:])
    every = max(1, len(test) // 64)
    return Built(model, gpt.CharWindows(ids[:split]), Subset(test, range(0, len(test), every)), _loss, _nll,
                 gpt._perplexity)


def build(width: int = 64, depth: int = 2, seed: int = 0, init: Init = nullcontext) -> Built:
    return build_from(lambda vocab: tiny_config(vocab, width, depth), seed, init)


WORKLOAD = Workload("llama", "Hugging Face transformers Llama (grouped-query attention, rotary, SwiGLU), "
                    "character-level, on the gpt workload's text", build,
                    global_batch=32, steps=60, lr=3e-3, tokens_per_sample=gpt.SEQ_LEN, splittable=True)


def from_config(name: str) -> Workload:
    """The workload ``hf:PATH`` names: that config's model (resized by ``--width``/``--depth``) on the same text."""
    path = hf_config.config_path(name)  # a missing file or a hub name fails here, before any process starts

    def build_config(width: int | None = None, depth: int | None = None, seed: int = 0,
                     init: Init = nullcontext) -> Built:
        return build_from(lambda _vocab: hf_config.load(name, width, depth), seed, init)

    return Workload(name, f"the causal language model of {path}, on the gpt workload's text",
                    build_config, global_batch=32, steps=60, lr=3e-3, tokens_per_sample=gpt.SEQ_LEN)
