"""torch's Transformer fast path where paratrain cannot let it run: under CPU autocast, and in encoders whose
attention a method hooks. In-process; the methods themselves run in tests/strategies/test_precision_matrix.py."""

from __future__ import annotations

import torch
from torch import nn

from paratrain import fastpath
from paratrain import precision as amp


def _encoder() -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(16))


def _padded() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(1))
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 2 + [True] * 3])
    return x, pad


def test_a_bf16_mixed_evaluation_with_a_padding_mask_runs_on_cpu_and_restores_the_switch():
    model = _encoder().eval()
    amp.apply(model, "bf16-mixed", torch.device("cpu"))
    x, pad = _padded()
    with torch.no_grad():
        out = model(x, src_key_padding_mask=pad)  # the fused kernel under CPU autocast failed on mixed dtypes
    assert out.dtype == torch.float32 and torch.isfinite(out[~pad]).all()
    assert torch.backends.mha.get_fastpath_enabled()


def test_nested_tensors_go_off_only_where_the_attention_is_hooked():
    model = nn.ModuleDict({"hooked": _encoder(), "layer_only": _encoder(), "plain": _encoder()})
    model["hooked"].layers[1].self_attn.register_forward_pre_hook(lambda *_: None)
    model["layer_only"].layers[0].register_forward_pre_hook(lambda *_: None)  # FSDP's units: attention untouched
    assert fastpath.turn_off_nested_tensor(model) == ["hooked"]
    assert [model[k].use_nested_tensor for k in ("hooked", "layer_only", "plain")] == [False, True, True]
    assert fastpath.turn_off_nested_tensor(model) == []  # said once


def test_the_padded_path_gives_what_the_nested_one_gives():
    model = _encoder().eval()
    x, pad = _padded()
    with torch.no_grad():
        nested = model(x, src_key_padding_mask=pad)
        model.use_nested_tensor = False
        padded = model(x, src_key_padding_mask=pad)
    torch.testing.assert_close(padded[~pad], nested[~pad], rtol=1e-5, atol=1e-5)
