"""Activation checkpointing (paratrain/blocks.py): the same numbers with less memory, under every torch method."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import paratrain as pt
from paratrain.blocks import checkpoint_activations, transformer_blocks
from paratrain.errors import ConfigError
from tests.helpers.launch import ROOT, check, max_diffs, paratrain
from tests.helpers.requirements import requires

SCRIPT = ROOT / "tests" / "helpers" / "scripts" / "transformer_cls.py"


MODES = ("full", "op", "every:2")


def _built(workload: str, mode: str | None, depth: int = 4):
    import importlib

    built = importlib.import_module(f"paratrain.workloads.{workload}").build(64, depth)
    if mode is not None:
        checkpoint_activations(built.model, mode)
    return built


def _step(workload: str, mode: str | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    built = _built(workload, mode)
    x = torch.stack([built.train[i][0] for i in range(8)])
    y = torch.stack([built.train[i][1] for i in range(8)])
    loss = built.loss_fn(built.model(x), y)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in built.model.named_parameters()}


@pytest.mark.parametrize("workload", ["gpt", pytest.param("llama", marks=requires("transformers"))])
def test_every_mode_gives_the_same_loss_and_gradients_under_the_same_names(workload):
    """Recomputing is not approximating: each mode's loss and gradients are those of keeping everything (fp32,
    within 1e-5), and no parameter is renamed (a hook, not a wrapper)."""
    loss, grads = _step(workload, None)
    for mode in MODES:
        loss_ckpt, grads_ckpt = _step(workload, mode)
        assert grads.keys() == grads_ckpt.keys(), mode
        assert abs(loss.item() - loss_ckpt.item()) <= 1e-5, mode
        worst = max((grads[n] - grads_ckpt[n]).abs().max().item() for n in grads)
        assert worst <= 1e-5, (mode, worst)


def test_each_mode_checkpoints_its_blocks():
    """full and op: every block; every:N the N-th, 2N-th, … (torchtitan's counting); an every:N that picks no
    block is refused rather than silently checkpointing nothing."""
    from torch.distributed._composable import checkpoint

    for mode, hooked in (("full", [0, 1, 2, 3]), ("op", [0, 1, 2, 3]), ("every:2", [1, 3]), ("every:3", [2])):
        built = _built("gpt", mode)
        assert [i for i, b in enumerate(built.model.blocks) if checkpoint.state(b) is not None] == hooked, mode
    with pytest.raises(ConfigError, match="every:5 checkpoints none of TinyGPT's 4 blocks"):
        _built("gpt", "every:5")


def test_op_and_every_2_keep_less_than_none_and_more_than_full():
    """The measured activation peak of one step (torch's allocator, through its profiler) orders the modes:
    full < op, every:2 < none — each mode trades memory for recomputation, as advise models it."""
    from tests.helpers.memory import step_peak_bytes

    peaks = {}
    for mode in (None, *MODES):
        built = _built("gpt", mode, depth=4)
        x = torch.stack([built.train[i][0] for i in range(16)])
        y = torch.stack([built.train[i][1] for i in range(16)])

        def step(built=built, x=x, y=y) -> None:
            built.loss_fn(built.model(x), y).backward()

        step()
        peaks[mode] = step_peak_bytes(step)
    assert peaks["full"] < peaks["op"] < peaks[None], peaks
    assert peaks["full"] < peaks["every:2"] < peaks[None], peaks


def test_the_session_says_what_each_mode_keeps(capsys):
    """One line per mode at prepare(): how many blocks, and what they keep."""
    from paratrain.blocks import checkpointed_notice

    assert checkpointed_notice("full", 2) == "activation checkpointing: 2 block(s) keep only their inputs for backward"
    assert "every other matrix multiply" in checkpointed_notice("op", 4)
    assert checkpointed_notice("every:2", 2).startswith("activation checkpointing (every:2): 2 block(s)")


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


@pytest.mark.parametrize(("flags", "said"), [(["--activation-checkpointing", "op"], "activation checkpointing (op): 2"),
                                             (["--activation-checkpointing", "every:2"],
                                              "activation checkpointing (every:2): 1 block(s)")])
def test_a_mode_from_the_flag_trains_the_same_numbers(tmp_path, flags, said):
    """`paratrain run --activation-checkpointing MODE` reaches the script's Session and changes no number."""
    runs = []
    for given in (["--no-activation-checkpointing"], flags):
        out = tmp_path / str(len(runs))
        proc = check(paratrain("run", "-s", "single", *given, str(SCRIPT), str(out), "--steps", "8"))
        runs.append(out)
    assert said in proc.stderr
    loss, weight = max_diffs(*runs)
    assert loss <= 1e-5 and weight <= 1e-5, (loss, weight)
