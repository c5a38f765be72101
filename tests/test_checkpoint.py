"""Checkpoints: one format across methods and world sizes, atomic, refusing what does not fit."""

import pytest
import torch

from paratrain import checkpoint
from paratrain.distenv import DistEnv
from paratrain.errors import CheckpointError
from paratrain.strategies.base import NoOptions
from paratrain.strategies.single import SingleStrategy
from tests.helpers.equivalence import assert_equivalent, train

STEPS = 200


@pytest.mark.multiprocess
def test_ddp2_checkpoint_resumes_on_fsdp1_and_single_with_the_identical_curve(tmp_path, reference):
    ref = reference("adamw")
    ckpt = tmp_path / "ckpt"
    train("ddp", 2, tmp_path / "first", "adamw", STEPS // 2, "--save", str(ckpt))
    assert (ckpt / "paratrain.json").is_file()
    for strategy in ("fsdp", "single"):
        resumed = train(strategy, 1, tmp_path / strategy, "adamw", STEPS, "--load", str(ckpt))
        assert_equivalent(ref, resumed, offset=STEPS // 2)


@pytest.mark.multiprocess
def test_sharded_fsdp2_checkpoint_loads_on_ddp2(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    train("fsdp", 2, tmp_path / "first", "sgd", STEPS // 2, "--save", str(ckpt))
    resumed = train("ddp", 2, tmp_path / "ddp", "sgd", STEPS, "--load", str(ckpt))
    assert_equivalent(reference("sgd"), resumed, offset=STEPS // 2)


def _single():
    strategy = SingleStrategy(NoOptions(), DistEnv())
    strategy.setup()
    return strategy


def _model(hidden=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, hidden), torch.nn.Linear(hidden, 2))


def test_checkpoint_of_another_model_is_refused_with_the_mismatched_keys(tmp_path):
    strategy = _single()
    checkpoint.save(tmp_path / "c", strategy, _model(), None, {"step_count": 3})
    other = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Linear(16, 2), torch.nn.Linear(2, 2))
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(tmp_path / "c", strategy, other, None)
    text = str(info.value)
    assert "missing: 2.bias, 2.weight" in text and "shape differs: 0.bias, 0.weight" in text


def test_round_trip_restores_weights_and_trainer_state(tmp_path):
    strategy = _single()
    model = _model()
    checkpoint.save(tmp_path / "c", strategy, model, None, {"step_count": 7, "loader": {"epoch": 1, "batch": 2}})
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    state = checkpoint.load(tmp_path / "c", strategy, fresh, None)
    assert state["step_count"] == 7 and state["loader"] == {"epoch": 1, "batch": 2}
    for a, b in zip(model.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)


def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path):
    strategy = _single()
    model = _model()
    checkpoint.save(tmp_path / "c", strategy, model, None, {"step_count": 1})

    class Exploding(SingleStrategy):
        def state_dict(self, model, optimizer):
            raise OSError("disk full")

    broken = Exploding(NoOptions(), DistEnv())
    broken.setup()
    with torch.no_grad():
        model[0].weight.add_(1.0)
    with pytest.raises(CheckpointError, match="could not write checkpoint"):
        checkpoint.save(tmp_path / "c", broken, model, None, {"step_count": 2})
    restored = _model()
    assert checkpoint.load(tmp_path / "c", strategy, restored, None)["step_count"] == 1
    assert not torch.equal(restored[0].weight, model[0].weight)


def test_refuses_to_overwrite_a_directory_that_is_not_a_checkpoint(tmp_path):
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="refusing to overwrite"):
        checkpoint.save(precious, _single(), _model(), None, {})
    assert (precious / "notes.txt").read_text() == "mine"


def test_loading_a_directory_that_is_not_a_checkpoint_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="not a paratrain checkpoint"):
        checkpoint.load(tmp_path, _single(), _model(), None)


def test_saving_before_the_first_step_leaves_the_optimizer_untouched(tmp_path):
    strategy = _single()
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    checkpoint.save(tmp_path / "c", strategy, model, opt, {"step_count": 0})
    assert not opt.state  # no zero-step state left behind: AdamW counts its steps from 1 as usual
    fresh = _model()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    checkpoint.load(tmp_path / "c", strategy, fresh, fresh_opt)
    assert not fresh_opt.state


def test_a_checkpoint_folder_holding_other_files_is_not_replaced(tmp_path):
    strategy = _single()
    checkpoint.save(tmp_path / "c", strategy, _model(), None, {})
    (tmp_path / "c" / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match=r"holds files that are not part of its checkpoint \(notes.txt\)"):
        checkpoint.save(tmp_path / "c", strategy, _model(), None, {})
    assert (tmp_path / "c" / "notes.txt").read_text() == "mine"


def test_a_save_failing_after_writing_shards_cleans_up_and_keeps_the_old_one(tmp_path, monkeypatch):
    strategy = _single()
    checkpoint.save(tmp_path / "c", strategy, _model(), None, {"step_count": 1})
    real_save = torch.save

    def failing(obj, path, *args, **kwargs):
        if str(path).endswith("trainer_state.pt"):
            raise OSError("disk full")
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.torch, "save", failing)
    with pytest.raises(CheckpointError, match="disk full; the previous checkpoint there is intact"):
        checkpoint.save(tmp_path / "c", strategy, _model(hidden=8), None, {"step_count": 2})
    monkeypatch.undo()
    assert not (tmp_path / ".c.tmp").exists()
    assert checkpoint.load(tmp_path / "c", strategy, _model(), None)["step_count"] == 1
