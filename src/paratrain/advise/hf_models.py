"""advise's view of a Hugging Face model: exact parameter shapes from transformers' own module built on the meta
device, and the transformer dimensions the activation formula needs read from its config.

Why from the config and the module both: the module gives every parameter (biases, tied embeddings, experts,
whatever the architecture has) without a byte allocated; the config names the dimensions (grouped-query heads,
SwiGLU or GELU, RMSNorm or LayerNorm, experts per token) that the module does not expose uniformly.
"""

from __future__ import annotations

from typing import Any

from paratrain.advise.models import ModelSpec, Transformer, on_meta, spec_of
from paratrain.workloads import hf_config

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


def from_hf(name: str, width: int | None = None, depth: int | None = None) -> ModelSpec:
    """``hf:PATH/config.json``: the model transformers builds from that local config, on the meta device."""
    config = hf_config.load(name, width, depth)
    model = on_meta(lambda: hf_config.causal_lm(config))
    model_type = getattr(config, "model_type", "model")
    size = "" if width is None and depth is None else f", width {config.hidden_size}, depth {config.num_hidden_layers}"
    spec = spec_of_causal_lm(model, f"{model_type} from {hf_config.config_path(name)}{size}")
    positions = spec.transformer.seq_len if spec.transformer else 0
    note = f"--seq-len defaults to the config's longest context, {positions}"
    return ModelSpec(name=spec.name, params=spec.params, shapes=spec.shapes, transformer=spec.transformer, note=note)
