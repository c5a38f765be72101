"""advise's activation model per checkpointing mode (paratrain/advise/activations.py); the real steps it is checked
against are in test_calibration.py."""

from __future__ import annotations

import pytest

from paratrain.advise import activations, models
from paratrain.errors import ConfigError

LLAMA_8B = models.PRESETS["llama3.1-8b"][0]


@pytest.mark.parametrize("autocast", [False, True])
def test_the_modes_lie_between_full_and_none(autocast):
    """Llama 3.1 8B, micro-batch 2, sequence 8192: op and every:2 each keep more than full and less than none, and
    every:1 is full (every block checkpointed)."""
    elem = 2 if autocast else 4
    arch = models.Transformer(**{**LLAMA_8B.__dict__, "seq_len": 8192})
    peak = {mode: activations.activation_bytes(arch, 2, elem, checkpointing=mode, autocast=autocast)
            for mode in (False, "full", "op", "every:2", "every:1", "every:4")}
    assert peak["full"] < peak["op"] < peak[False]
    assert peak["full"] < peak["every:2"] < peak["every:4"] < peak[False]  # every:4 checkpoints fewer blocks
    assert peak["every:1"] == peak["full"]
    assert activations.activation_bytes(arch, 2, elem, checkpointing=True, autocast=autocast) == peak["full"]


def test_op_keeps_every_other_matrix_multiply_and_the_attention():
    """A Llama block multiplies by q, k, v, o, gate, up, down: op keeps q, v, gate and down, the attention's output
    and its fp32 log-sum-exp. A GPT block by its fused q/k/v, the output projection and the MLP's two: op keeps
    q/k/v and the MLP's hidden layer."""
    llama = models.Transformer(layers=2, hidden=64, heads=4, kv_heads=2, vocab=10, seq_len=8, ffn=192, mlp="swiglu",
                               norm="rmsnorm")
    tokens = 3 * 8
    assert activations.selective_bytes(llama, 3, 2) == tokens * (64 + 32 + 192 + 64 + 64) * 2 + 3 * 4 * 8 * 4
    gpt = models.Transformer(layers=2, hidden=64, heads=4, vocab=10, seq_len=8, ffn=256)
    assert activations.selective_bytes(gpt, 3, 4) == tokens * (3 * 64 + 256 + 64) * 4 + 3 * 4 * 8 * 4


def test_a_bad_mode_is_refused():
    with pytest.raises(ConfigError, match="not a mode"):
        activations.activation_bytes(LLAMA_8B, 1, 2, checkpointing="every:0")
