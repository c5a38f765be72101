"""What `advise` knows about a model: its parameter count, its parameter shapes when it can see them, and the
transformer dimensions the activation formula needs.

Why four sources: a user planning a 70B run has no module to hand (``--params`` or a preset), one with a module
wants it counted exactly (``--model pkg.mod:factory``, built on the meta device so nothing is allocated), one with a
Hugging Face model has its config.json (``--model hf:PATH``, transformers' own module on the meta device), and the
bundled workloads are what ``compare`` measures, so `advise` can be checked against them byte for byte.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from paratrain.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import torch

MAX_PARAMS = 1e13  # ten trillion: beyond any model trained to date, so a larger figure is a typo


@dataclass(frozen=True, kw_only=True)
class Transformer:
    """Decoder-only transformer dimensions (public facts for the presets). ``mlp`` is ``gelu`` (two matrices)
    or ``swiglu`` (three, as in LLaMA); ``kv_heads`` < ``heads`` is grouped-query attention."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    ffn: int
    kv_heads: int | None = None
    mlp: str = "gelu"
    norm: str = "layernorm"
    experts: int = 1  # experts each token passes through (mixture of experts): that many MLP activations per token

    @property
    def kv_width(self) -> int:
        """Width of the key and of the value projection: fewer heads than the queries under grouped-query attention."""
        return (self.kv_heads or self.heads) * (self.hidden // self.heads)

    def block_matrices(self) -> tuple[int, int]:
        """Elements of one block's weight matrices: (attention's q, k, v and output; one MLP's two or three)."""
        h, kv = self.hidden, self.kv_width
        return h * h * 2 + h * kv * 2, (3 if self.mlp == "swiglu" else 2) * h * self.ffn

    def norm_elements(self) -> int:
        """Elements of one pre-norm block's two norms (a LayerNorm's bias too)."""
        return 2 * self.hidden * (2 if self.norm == "layernorm" else 1)

    def split_elements(self, *, biases: bool) -> int:
        """Elements tensor parallelism divides: every block's matrices, and with biases those of q/k/v and of the
        MLP's first layer(s) (split by their outputs; the row-split layers' biases stay whole)."""
        h, kv = self.hidden, self.kv_width
        attention, mlp = self.block_matrices()
        if biases:
            attention, mlp = attention + h + 2 * kv, mlp + (2 if self.mlp == "swiglu" else 1) * self.ffn
        return self.layers * (attention + mlp * self.experts)

    def param_count(self, *, biases: bool, tied: bool) -> int:
        h, kv = self.hidden, self.kv_width
        attn_matrices, mlp_matrices = self.block_matrices()
        attn = attn_matrices + ((h + 2 * kv + h) if biases else 0)
        mlp = mlp_matrices + ((self.ffn + h) if biases else 0)
        norm = 2 * h if self.norm == "layernorm" else h
        embed = self.vocab * h * (1 if tied else 2) + (self.seq_len * h if self.norm == "layernorm" else 0)
        return embed + self.layers * (attn + mlp + 2 * norm) + norm + (self.vocab if biases and not tied else 0)


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """``shapes`` (every parameter's shape, in model order) make per-rank shard sizes exact; ``transformer``
    makes activations computable; ``activation_bytes`` is a measured count per micro-batch instead."""

    name: str
    params: int
    shapes: tuple[tuple[int, ...], ...] | None = None
    transformer: Transformer | None = None
    activation_bytes: int | None = None
    activation_batch: int | None = None  # the micro-batch activation_bytes was counted at
    note: str = ""
    # Elements tensor parallelism divides across ranks (the layers its plan splits: their weights, and the biases of
    # those split by their outputs); None where the model has no plan
    split_elements: int | None = None


def _gpt2(layers: int, hidden: int, heads: int) -> Transformer:
    return Transformer(layers=layers, hidden=hidden, heads=heads, vocab=50257, seq_len=1024, ffn=4 * hidden)


def _llama(layers: int, hidden: int, heads: int, ffn: int, seq: int, kv: int | None = None,
           vocab: int = 32000) -> Transformer:
    return Transformer(layers=layers, hidden=hidden, heads=heads, vocab=vocab, seq_len=seq, ffn=ffn, kv_heads=kv,
                       mlp="swiglu", norm="rmsnorm")


_UNTIED = {"biases": False, "tied": False}

# GPT-2 (Radford et al. 2019: tied embeddings, learned positions, biases); LLaMA 7B/13B (Touvron et al. 2023,
# 2,048 tokens) and Llama 2 70B (grouped-query attention with 8 key/value heads, 4,096 tokens). No biases.
PRESETS: dict[str, tuple[Transformer, dict[str, bool], str]] = {
    "gpt2": (_gpt2(12, 768, 12), {"biases": True, "tied": True}, "GPT-2 small"),
    "gpt2-medium": (_gpt2(24, 1024, 16), {"biases": True, "tied": True}, "GPT-2 medium"),
    "gpt2-xl": (_gpt2(48, 1600, 25), {"biases": True, "tied": True}, "GPT-2 XL"),
    "llama-7b": (_llama(32, 4096, 32, 11008, 2048), {"biases": False, "tied": False}, "LLaMA 7B"),
    "llama-13b": (_llama(40, 5120, 40, 13824, 2048), {"biases": False, "tied": False}, "LLaMA 13B"),
    "llama-70b": (_llama(80, 8192, 64, 28672, 4096, kv=8), {"biases": False, "tied": False}, "Llama 2 70B"),
    # Llama 3 / 3.1 (Grattafiori et al. 2024, table 3): grouped-query attention with 8 key/value heads, a 128,256
    # token vocabulary, untied embeddings; pre-trained at 8,192 tokens (3.1 extends the context to 128k later).
    "llama3-8b": (_llama(32, 4096, 32, 14336, 8192, kv=8, vocab=128256), _UNTIED, "Llama 3 8B"),
    "llama3-70b": (_llama(80, 8192, 64, 28672, 8192, kv=8, vocab=128256), _UNTIED, "Llama 3 70B"),
    "llama3.1-8b": (_llama(32, 4096, 32, 14336, 8192, kv=8, vocab=128256), _UNTIED, "Llama 3.1 8B"),
    "llama3.1-70b": (_llama(80, 8192, 64, 28672, 8192, kv=8, vocab=128256), _UNTIED, "Llama 3.1 70B"),
    "llama3.1-405b": (_llama(126, 16384, 128, 53248, 8192, kv=8, vocab=128256), _UNTIED, "Llama 3.1 405B"),
}
BUNDLED = ("mlp", "cnn", "gpt", "llama")


def from_params(count: float) -> ModelSpec:
    if not math.isfinite(count) or count < 1:
        raise ConfigError(f"--params {count:g} must be a positive number of parameters, e.g. 1.3e9")
    if count > MAX_PARAMS:
        raise ConfigError(f"--params {count:g} is more than {MAX_PARAMS:g} parameters",
                          hint="check the exponent: 1.3e9 is 1.3 billion")
    return ModelSpec(name=f"{_human(count)} parameters", params=int(count))


def from_preset(name: str) -> ModelSpec:
    found = PRESETS.get(name.lower())
    if found is None and name.endswith(".json"):  # a Hugging Face config given without its prefix
        raise ConfigError(f'--model "{name}" is not a preset; a Hugging Face config is given as hf:PATH',
                          hint=f"use --model hf:{name}")
    if found is None:
        raise ConfigError(f'unknown model preset "{name}" (presets: {", ".join(PRESETS)}).'
                          f"{did_you_mean(name.lower(), PRESETS)}",
                          hint="or give --params N, or --model package.module:factory")
    arch, kind, title = found
    return ModelSpec(name=name.lower(), params=arch.param_count(**kind), transformer=arch, note=title,
                     split_elements=arch.split_elements(biases=kind["biases"]))


def from_bundled(name: str, width: int | None = None, depth: int | None = None) -> ModelSpec:
    """A bundled `compare` workload, built on the meta device with the sizes `compare` would use."""
    import torch

    from paratrain.workloads import get

    kwargs = {k: v for k, v in (("width", width), ("depth", depth)) if v is not None}
    model = on_meta(lambda: get(name).build(**kwargs).model)
    from paratrain.workloads.gpt import SEQ_LEN  # llama trains on gpt's text windows

    if name == "llama":
        return spec_of_causal_lm(model, f"llama workload (width {model.config.hidden_size}, depth "
                                        f"{model.config.num_hidden_layers})", seq_len=SEQ_LEN)
    if name == "gpt":
        hidden = model.tok.embedding_dim
        arch = Transformer(layers=len(model.blocks), hidden=hidden, heads=model.heads,
                           vocab=model.tok.num_embeddings, seq_len=SEQ_LEN, ffn=4 * hidden)
        return spec_of(model, f"gpt workload (width {hidden}, depth {arch.layers})", transformer=arch)
    x = torch.zeros(1, 64, device="meta")  # mlp and cnn both read the flattened 8×8 digits
    size = model[0].out_features if name == "mlp" else model[1].out_channels
    return spec_of(model, f"{name} workload (width {size})", example=(x,))


def from_factory(target: str) -> ModelSpec:
    """``package.module:factory`` returning a module, or ``(module, example_inputs)`` to count activations too."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ConfigError(f'--model "{target}" must be a preset ({", ".join(PRESETS)}), a bundled workload '
                          f"({', '.join(BUNDLED)}), hf:PATH/config.json or package.module:factory")
    with _current_folder_importable():
        return _build_factory(target, _import_factory(target, module_name, attr))


@contextlib.contextmanager
def _current_folder_importable() -> Iterator[None]:
    """The current folder first on the import path while the factory is imported and built, as ``python -m``
    would have it: the ``paratrain`` command starts with its own bin folder there instead, so ``mymodel.py`` next
    to the user was not found. Taken off again afterwards."""
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def _import_factory(target: str, module_name: str, attr: str) -> Callable[[], Any]:
    """The factory, or one line saying what is missing: the module itself (where it was looked for), something
    the module imports, or the name inside it."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise _not_found(target, module_name, exc) from None
    except ImportError as exc:
        raise ConfigError(f'--model "{target}": importing {module_name} failed ({exc})') from None
    except SyntaxError as exc:
        raise ConfigError(f'--model "{target}": {exc.filename} line {exc.lineno}: {exc.msg}') from None
    factory = getattr(module, attr, None)
    if factory is None:
        names = [n for n in vars(module) if callable(vars(module)[n]) and not n.startswith("_")]
        raise ConfigError(f'--model "{target}": {module_name} has no "{attr}".{did_you_mean(attr, names)}',
                          hint=f"name the function that builds the model after the colon ({module_name}:FACTORY)")
    return factory


def _not_found(target: str, module_name: str, exc: ModuleNotFoundError) -> ConfigError:
    """The module (or a package on its path) is not there; or it is, and something it imports is missing."""
    missing = exc.name or module_name
    if module_name == missing or module_name.startswith(missing + "."):
        top = missing.split(".")[0]
        return ConfigError(f'--model "{target}": cannot import it: no module named {missing} ({top}.py or a '
                           f"{top}/ package in {Path.cwd()}, or an installed package)",
                           hint="run paratrain advise from the folder that holds it, or install it")
    return ConfigError(f'--model "{target}": {module_name} imports {missing}, which is not installed',
                       hint=f"install {missing.split('.')[0]}, or run with the environment {module_name} needs")


def _build_factory(target: str, factory: Callable[[], Any]) -> ModelSpec:
    import torch

    made = on_meta(factory)
    model, example = (made[0], tuple(made[1]) if isinstance(made[1], (tuple, list)) else (made[1],)) \
        if isinstance(made, tuple) else (made, None)
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f'--model "{target}" returned {type(model).__name__}, not a torch.nn.Module',
                          hint="return the module, or (module, example_inputs)")
    return spec_of(model, target, example=example)


def resolve(model: str | None, params: float | None, width: int | None = None,
            depth: int | None = None, seq_len: int | None = None) -> ModelSpec:
    """The model ``--params``/``--model`` name. ``seq_len`` is advise's --seq-len, passed so that a Hugging Face
    config's header says the config's own context is used only when no length was given."""
    if (model is None) == (params is None):
        raise ConfigError("say which model: --params N, or --model with a preset, a bundled workload or "
                          "package.module:factory", hint="e.g. --params 1.3e9 or --model llama-7b")
    if params is not None:
        return from_params(params)
    assert model is not None
    if model.lower() in PRESETS:
        return from_preset(model)
    if model in BUNDLED:
        return from_bundled(model, width, depth)
    if model.startswith("hf:"):
        return from_hf(model, width, depth, seq_len)
    if ":" in model:
        return from_factory(model)
    return from_preset(model)  # reports the nearest preset


def on_meta(factory: Callable[[], Any]) -> Any:
    """Build on the meta device: shapes and dtypes without a byte of memory, so a 70B module costs nothing."""
    import torch

    with torch.device("meta"):
        return factory()


def spec_of(model: torch.nn.Module, name: str, *, transformer: Transformer | None = None,
             example: tuple[Any, ...] | None = None) -> ModelSpec:
    shapes = tuple(tuple(p.shape) for p in model.parameters())
    count = sum(math.prod(s) for s in shapes)
    if count == 0:
        raise ConfigError(f"{name} has no parameters", hint="check that the factory builds the model")
    act = batch = None
    note = ""
    if example is not None and transformer is None:
        act, batch = saved_activation_bytes(model, lambda: model(*example)), _batch_of(example)
        note = "activations counted on the meta device at the example's batch size"
    return ModelSpec(name=name, params=count, shapes=shapes, transformer=transformer, activation_bytes=act,
                     activation_batch=batch, note=note, split_elements=_split_elements(model))


def _split_elements(model: torch.nn.Module) -> int | None:
    """What --strategy tp would divide across ranks, by the model's own plan (strategies.tp.find_plan); None without
    one."""
    from paratrain.strategies.tp import find_plan

    try:
        plan = find_plan(model)
    except ConfigError:
        return None
    modules = dict(model.named_modules())
    return sum(modules[name].weight.numel() + (modules[name].bias.numel() if style == "colwise"
                                                and modules[name].bias is not None else 0)
               for name, style in plan.items())


def _batch_of(example: tuple[Any, ...]) -> int:
    import torch

    first = next((t for t in example if isinstance(t, torch.Tensor) and t.dim() > 0), None)
    return int(first.shape[0]) if first is not None else 1


def saved_activation_bytes(model: torch.nn.Module, forward: Callable[[], Any]) -> int:
    """Bytes the forward pass keeps for backward: every distinct storage autograd saves, parameters excluded.

    Counted by storage, not by tensor, because views (q, k, v split from one projection) share memory.
    """
    import torch

    params = {p.untyped_storage()._cdata for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in params:
            seen[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def _human(count: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.3g}{unit}"
    return f"{count:.0f}"


# Hugging Face models: exact parameter shapes from transformers' own module built on the meta device, and the
# dimensions the activation formula needs read from its config (which names what the module does not expose
# uniformly: grouped-query heads, SwiGLU or GELU, RMSNorm or LayerNorm, experts per token).
GATED = ("silu", "swish", "swiglu")


def transformer_of(config: Any, seq_len: int | None = None) -> Transformer:
    """The dimensions of ``config`` (any decoder-only transformers config: Llama, Mistral, Qwen, GPT-2, Mixtral…).
    The sequence length is ``seq_len`` or the config's longest context (advise's --seq-len overrides it)."""
    hidden = config.hidden_size
    act = str(getattr(config, "hidden_act", None) or getattr(config, "activation_function", "gelu")).lower()
    ffn = (getattr(config, "moe_intermediate_size", None) or getattr(config, "intermediate_size", None)
           or getattr(config, "n_inner", None) or 4 * hidden)
    experts = getattr(config, "num_experts_per_tok", None) or 1
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 2048
    return Transformer(layers=config.num_hidden_layers, hidden=hidden, heads=config.num_attention_heads,
                       kv_heads=getattr(config, "num_key_value_heads", None), vocab=config.vocab_size,
                       seq_len=seq_len or positions, ffn=ffn, experts=experts,
                       mlp="swiglu" if act in GATED else "gelu",
                       norm="rmsnorm" if hasattr(config, "rms_norm_eps") else "layernorm")


def spec_of_causal_lm(model: Any, name: str, seq_len: int | None = None) -> ModelSpec:
    """A transformers causal LM already built (on the meta device): its exact shapes and its config's dimensions."""
    arch = transformer_of(model.config, seq_len)
    return spec_of(model, name, transformer=arch)


def from_hf(name: str, width: int | None = None, depth: int | None = None, seq_len: int | None = None) -> ModelSpec:
    """``hf:PATH/config.json``: the model transformers builds from that local config, on the meta device.

    Without ``seq_len`` (advise's --seq-len) the config's longest context is used, which can be far longer than the
    user trains at (Llama 3.1: 131,072), so a note says so; with it the note would contradict the flag."""
    from paratrain.workloads import hf_config

    config = hf_config.load(name, width, depth)
    model = on_meta(lambda: hf_config.causal_lm(config))
    model_type = getattr(config, "model_type", "model")
    size = "" if width is None and depth is None else f", width {config.hidden_size}, depth {config.num_hidden_layers}"
    spec = spec_of_causal_lm(model, f"{model_type} from {hf_config.config_path(name)}{size}")
    if seq_len is not None:
        return spec
    positions = spec.transformer.seq_len if spec.transformer else 0
    return dataclasses.replace(spec, note=f"--seq-len defaults to the config's longest context, {positions}")
