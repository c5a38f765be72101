"""Hugging Face model configs: the ``llama`` workload's and any local ``config.json`` (``hf:PATH``).

Why a module of its own: both ``compare`` (which trains the model) and ``advise`` (which sizes it on the meta
device) read the same config the same way: from a local file only (no network at run time), resized by
``--width``/``--depth`` when asked, and built with transformers' own ``from_config`` so the module is the one a
user of transformers trains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paratrain.errors import ConfigError
from paratrain.workloads import hf_keys

PREFIX = "hf:"
INSTALL_HINT = "pip install 'paratrain[hf]' (transformers)"


def is_hf(name: str | None) -> bool:
    return bool(name) and str(name).startswith(PREFIX)


def transformers_module() -> Any:
    """transformers, or one line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ConfigError("Hugging Face models need the transformers package, which is not installed",
                          hint=INSTALL_HINT) from None
    return transformers


def config_path(name: str) -> Path:
    """The local file ``hf:PATH`` names (PATH a config.json or the folder holding one), absolute, so that a relative
    path means the same from the folder a training process starts in. A hub name ("meta-llama/Llama-3.1-8B") is
    refused in one line: nothing is downloaded at run time."""
    raw = name[len(PREFIX):] if name.startswith(PREFIX) else name
    if not raw:
        raise ConfigError(f'"{name}" names no config', hint="give hf:PATH/config.json")
    path = Path(raw).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return path.resolve()
    looks_like_hub = not raw.endswith(".json") and raw.count("/") == 1 and not raw.startswith((".", "/", "~"))
    if looks_like_hub:
        raise ConfigError(f'"{name}": no local config.json there, and paratrain does not download models '
                          f'("{raw}" looks like a Hugging Face Hub name)',
                          hint=f"download its config.json first (huggingface-cli download {raw} config.json "
                               "--local-dir DIR), then give hf:DIR/config.json")
    raise ConfigError(f'"{name}": no such file {path.absolute()}',
                      hint="give hf:PATH to a model's config.json, or to the folder that holds it")


def load(name: str, width: int | None = None, depth: int | None = None) -> Any:
    """The transformers config ``hf:PATH`` names, its hidden size and layer count replaced by ``width``/``depth``
    when given (the head size kept where the width allows, as a smaller member of the same family would). A
    misspelt or missing key is refused (``hf_keys``): transformers would fill in its default silently."""
    path = config_path(name)
    transformers = transformers_module()
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{path}: transformers cannot read it as a model config ({first})",
                          hint="give the config.json of a model transformers knows (model_type)") from None
    hf_keys.check(path, json.loads(path.read_text()), config)
    return resize(config, width, depth)


def resize(config: Any, width: int | None, depth: int | None) -> Any:
    """``config`` with ``hidden_size`` = width and ``num_hidden_layers`` = depth (a copy; heads and the MLP scaled
    with the width so the model stays what its family would be at that size)."""
    if width is None and depth is None:
        return config
    config = config.__class__.from_dict(config.to_dict())
    if depth is not None:
        if depth < 1:
            raise ConfigError(f"--depth {depth} must be at least 1")
        config.num_hidden_layers = depth
        if getattr(config, "layer_types", None):  # per-layer attention kinds (newer configs) follow the depth
            config.layer_types = [config.layer_types[i % len(config.layer_types)] for i in range(depth)]
    if width is not None:
        heads = config.num_attention_heads
        if width < 1 or width % heads:
            raise ConfigError(f"--width {width} must be a positive multiple of {heads} (the config's attention heads)")
        scale = width / config.hidden_size
        config.hidden_size = width
        if getattr(config, "head_dim", None):
            config.head_dim = width // heads
        if getattr(config, "intermediate_size", None):
            config.intermediate_size = max(1, round(config.intermediate_size * scale))
        if getattr(config, "n_inner", None):
            config.n_inner = max(1, round(config.n_inner * scale))
    return config


def causal_lm(config: Any) -> Any:
    """The causal language model ``config`` describes, with fresh weights (the current torch seed), as
    transformers builds it: ``AutoModelForCausalLM.from_config``. PyTorch's fused attention (sdpa), the kernel the
    other bundled transformer uses."""
    transformers = transformers_module()
    try:
        return transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    except ValueError as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"transformers has no causal language model for this config ({first})",
                          hint="paratrain trains and sizes decoder-only (causal LM) configs") from None
