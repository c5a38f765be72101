"""Activation checkpointing (paratrain/blocks.py): the same numbers with less memory, under every torch method."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paratrain as pt
from paratrain.blocks import checkpoint_activations, transformer_blocks
from paratrain.errors import ConfigError
from tests.helpers.launch import ROOT, check, max_diffs, paratrain

SCRIPT = ROOT / "tests" / "helpers" / "scripts" / "transformer_cls.py"


def _gpt_step(checkpointing: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    from paratrain.workloads.gpt import build

    built = build(64, 3)
    if checkpointing:
        assert checkpoint_activations(built.model) == 3
    x = torch.stack([built.train[i][0] for i in range(8)])
    y = torch.stack([built.train[i][1] for i in range(8)])
    loss = built.loss_fn(built.model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in built.model.named_parameters()}


def test_the_same_loss_and_gradients_under_the_same_names():
    loss, grads = _gpt_step(False)
    loss_ckpt, grads_ckpt = _gpt_step(True)
    assert grads.keys() == grads_ckpt.keys()  # a hook, not a wrapper: every parameter keeps its name
    assert torch.equal(loss, loss_ckpt)
    assert all(torch.allclose(grads[n], grads_ckpt[n], atol=1e-7) for n in grads)


def test_a_model_without_blocks_is_one_clear_error():
    assert transformer_blocks(nn.Sequential(nn.Linear(2, 2))) == []
    with pytest.raises(ConfigError, match="Sequential keeps none in an nn"):
        checkpoint_activations(nn.Sequential(nn.Linear(2, 2)))
    session = pt.Session(activation_checkpointing=True)
    model = nn.Linear(2, 2)
    with pytest.raises(ConfigError, match="activation checkpointing works per transformer block"):
        session.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    session.close()


@pytest.mark.multiprocess
@pytest.mark.parametrize(("strategy", "nproc"), [("single", 1), ("ddp", 2), ("fsdp", 2), ("deepspeed:zero3", 2),
                                                  ("horovod", 2)])
def test_every_method_trains_the_same_numbers_with_it(tmp_path, strategy, nproc):
    """A stock TransformerEncoder (its layers: an nn.ModuleList), a padding mask, AdamW, clipping, evaluation."""
    if strategy == "horovod":
        import os

        if os.environ.get("CI") != "true":
            pytest.importorskip("horovod")
    runs = {}
    for flag in ("--no-activation-checkpointing", "--activation-checkpointing"):
        out = tmp_path / flag.strip("-")
        proc = check(paratrain("run", "-s", strategy, "-n", str(nproc), flag, str(SCRIPT), str(out), "--steps", "16"))
        runs[flag] = out
    assert "activation checkpointing: 2 block(s)" in proc.stderr
    loss, weight = max_diffs(runs["--no-activation-checkpointing"], runs["--activation-checkpointing"])
    assert loss <= 1e-5 and weight <= 1e-5, (loss, weight)
