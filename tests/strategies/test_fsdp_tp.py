"""fsdp+tp: tensor parallel inside groups of ranks, FSDP across them (a 2-D mesh). The conformance suite runs it at
two processes (one group of two); here the grid it is for, 2 × 2, and the sizes it refuses."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import EXAMPLES, ROOT, SESSION_TRAIN, check, paratrain

TRAIN = ROOT / "src" / "paratrain" / "workloads" / "train.py"
pytestmark = pytest.mark.multiprocess


def test_two_groups_of_two_train_the_one_process_curve_and_resume_under_ddp(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    first = train("fsdp+tp:tp=2", 4, tmp_path / "first", "adamw", 40, "--save", str(ckpt))
    assert_equivalent(reference("adamw", steps=40), first)
    resumed = train("ddp", 2, tmp_path / "resumed", "adamw", 80, "--load", str(ckpt))
    assert_equivalent(reference("adamw", steps=80), resumed, offset=40)


def test_a_group_size_that_does_not_divide_the_processes_is_one_line():
    proc = paratrain("run", "-s", "fsdp+tp:tp=3", "-n", "2", str(SESSION_TRAIN), "--steps", "2")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "fsdp+tp:tp=3 needs a number of processes that is a multiple of 3 (2 given)" in last, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_handwritten_2d_script_runs_unchanged_with_the_one_process_result(tmp_path, reference):
    check(paratrain("run", "-s", "fsdp+tp", "-n", "4", str(EXAMPLES / "handwritten" / "fsdp_tp.py"), "--steps",
                    "200", "--out", str(tmp_path)))
    assert_equivalent(reference("sgd"), tmp_path)


def test_the_whole_state_dict_is_gathered_without_dtensors_note_on_every_rank():
    """DTensor logs that unsharding a 2-D placement takes "2 sequential all_gather operations": true, and no news to
    a user who asked for the whole model once (examples/session_train.py does, at its end)."""
    proc = check(paratrain("run", "-s", "fsdp+tp", "-n", "2", str(SESSION_TRAIN), "--steps", "3"))
    assert "sequential" not in proc.stderr, proc.stderr


def test_no_rank_warns_that_an_in_place_op_would_drop_fsdps_pre_backward_hook(tmp_path):
    """The split hands the head's output back through DTensor.to_local(), a view; FSDP2 warns on every rank that an
    in-place op on a unit's view output would skip its all-gather. The strategy gives FSDP an output of its own."""
    for script, args in ((SESSION_TRAIN, ["--steps", "3"]),
                         (TRAIN, ["--workload", "gpt", "--steps", "2"])):
        proc = check(paratrain("run", "-s", "fsdp+tp", "-n", "2", str(script), *args))
        output = proc.stdout + proc.stderr
        assert "silently drop the pre-backward hook" not in output and "returned a view tensor" not in output, output


def test_a_view_the_scripts_own_forward_returns_is_left_to_fsdps_warning():
    """Only views DTensor.to_local() made are copied: the script's own is its to know about."""
    from paratrain.strategies.fsdp_tp import _own_outputs

    logits = torch.randn(4, 8, requires_grad=True) * 2
    last = logits[:, -1]
    out = _own_outputs(torch.nn.Identity(), (), (last, {"x": logits}))
    assert out[0] is last and out[1]["x"] is logits
