"""A killed worker costs nothing: periodic checkpoints, restart, and a run that continues on the identical curve."""

import json
from pathlib import Path

import pytest
import torch

from paratrain.checkpoint import META
from paratrain.errors import ConfigError
from paratrain.resume import AutoCheckpoint
from tests.helpers.launch import ROOT, check, paratrain, worker_env

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "resumable.py")
STEPS = 60


def _run(out: Path, strategy: str, *flags: str, kill: str | None = None):
    out.mkdir(parents=True, exist_ok=True)
    env = worker_env(**({"KILL": kill} if kill else {}))
    return check(paratrain("run", "-s", strategy, "-n", "2", "--checkpoint-dir", str(out / "ck"),
                           "--checkpoint-every", "10", *flags, SCRIPT, str(out), str(STEPS), env=env))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    _run(out, "ddp")
    return json.loads((out / "losses-0.json").read_text()), torch.load(out / "weights.pt", weights_only=True)


def _assert_same_run(out: Path, uninterrupted, resumed_at: int) -> None:
    ref_losses, ref_weights = uninterrupted
    losses = json.loads((out / "losses-1.json").read_text())  # the restarted attempt's curve
    assert min(int(k) for k in losses) == resumed_at + 1
    assert max(abs(losses[k] - ref_losses[k]) for k in losses) <= 1e-6
    weights = torch.load(out / "weights.pt", weights_only=True)
    assert max((weights[k] - ref_weights[k]).abs().max().item() for k in ref_weights) <= 1e-6


@pytest.mark.multiprocess
def test_kill_9_of_a_rank_resumes_from_the_last_checkpoint_exactly(tmp_path, uninterrupted):
    proc = _run(tmp_path, "ddp", "--max-restarts", "1", kill="step:35")
    assert "resumed from" in proc.stderr and "(step 30)" in proc.stderr
    _assert_same_run(tmp_path, uninterrupted, resumed_at=30)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-00000050", "step-00000060"]  # --keep 2


@pytest.mark.multiprocess
def test_kill_between_shard_writes_keeps_the_previous_checkpoint(tmp_path, uninterrupted):
    # rank 1 dies inside the save of step 20, after its model shard is on disk: step 10 is the latest complete one
    proc = _run(tmp_path, "fsdp", "--max-restarts", "1", "--keep", "3", kill="save:20")
    assert "(step 10)" in proc.stderr
    _assert_same_run(tmp_path, uninterrupted, resumed_at=10)
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["step-00000040", "step-00000050",
                                                                   "step-00000060"]


def _fake_checkpoint(folder: Path, complete: bool = True) -> None:
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(b"x")
    if complete:
        (folder / META).write_text("{}")


def test_latest_is_the_newest_complete_checkpoint_and_prune_keeps_k(tmp_path):
    auto = AutoCheckpoint(tmp_path, every=10, keep=2)
    for step in (10, 20, 30):
        _fake_checkpoint(auto.path_for(step))
    _fake_checkpoint(auto.path_for(40), complete=False)  # a folder of that name without our metadata: not one
    _fake_checkpoint(tmp_path / ".step-00000050.tmp", complete=False)  # a save that died before its rename
    _fake_checkpoint(tmp_path / ".step-00000020.tmp", complete=False)
    assert auto.latest() == auto.path_for(30)
    auto.prune()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [".step-00000050.tmp", "step-00000020", "step-00000030", "step-00000040"]
    assert auto.due(20) and not auto.due(25)


def test_checkpoint_dir_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "ck"
    file.write_text("my notes")
    with pytest.raises(ConfigError, match="is a file"):
        AutoCheckpoint(file, every=10)
    proc = paratrain("run", "-s", "single", "--checkpoint-dir", str(file), "--checkpoint-every", "5", SCRIPT, "x")
    assert proc.returncode == 2 and "is a file" in proc.stderr and "Traceback" not in proc.stderr
    assert file.read_text() == "my notes"


def test_checkpoint_every_without_a_directory_is_a_usage_error():
    proc = paratrain("run", "-s", "single", "--checkpoint-every", "5", SCRIPT, "x")
    assert proc.returncode == 2 and "--checkpoint-dir and --checkpoint-every go together" in proc.stderr
