"""Session in one process: defaults, errors that name the fix, collectives that degrade to no-ops."""

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt
from paratrain.errors import ConfigError, LaunchError


def test_plain_python_means_single():
    session = pt.Session()
    assert (session.strategy, session.rank, session.world_size, session.is_main) == ("single", 0, 1, True)
    assert session.device == torch.device("cpu")
    session.close()


def test_distributed_method_without_launcher_names_the_command():
    with pytest.raises(LaunchError) as info:
        pt.Session("ddp")
    assert "paratrain run --strategy ddp --nproc 2" in info.value.one_line()


def test_conflicting_method_and_launcher_is_an_error(monkeypatch):
    monkeypatch.setenv("PARATRAIN_STRATEGY", "single")
    with pytest.raises(ConfigError, match="launched with --strategy single"):
        pt.Session("fsdp")


def test_grad_accum_steps_once_per_global_batch():
    session = pt.Session(grad_accum=2)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
    model, opt, loader = session.prepare(model, opt, DataLoader(data, batch_size=4))
    sizes = []
    for x, y in loader:
        sizes.append(len(x))
        session.backward(torch.nn.functional.mse_loss(model(x), y))
        session.step()
    assert sizes == [2, 2, 2, 2] and session.step_count == 2
    session.close()


def test_compares_float_order_floor_splits_a_scripts_own_accumulation_further(monkeypatch):
    """The floor's split multiplies Session(grad_accum=K) instead of conflicting with it as a flag would."""
    from paratrain.distenv import ACCUM_SPLIT_VAR

    monkeypatch.setenv(ACCUM_SPLIT_VAR, "2")
    session = pt.Session(grad_accum=2)
    model = torch.nn.Linear(2, 1)
    data = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
    model, _, loader = session.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                       DataLoader(data, batch_size=8))
    sizes = []
    for x, y in loader:
        sizes.append(len(x))
        session.backward(torch.nn.functional.mse_loss(model(x), y))
        session.step()
    assert session.grad_accum == 4 and sizes == [2, 2, 2, 2] and session.step_count == 1
    session.close()


def test_all_reduce_and_print_in_one_process(capsys):
    session = pt.Session()
    assert session.all_reduce(3.0, op="mean") == 3.0
    t = session.all_reduce(torch.tensor(2.0), op="sum")
    assert isinstance(t, torch.Tensor) and t.item() == 2.0
    session.print("only once")
    assert capsys.readouterr().out == "only once\n"
    session.close()


def test_prepare_twice_is_refused():
    session = pt.Session()
    session.prepare(torch.nn.Linear(1, 1))
    with pytest.raises(ConfigError, match="already called"):
        session.prepare(torch.nn.Linear(1, 1))
    session.close()


def test_resume_continues_the_data_order(tmp_path):
    def run(load=None, save=None, steps=5):
        session = pt.Session()
        torch.manual_seed(0)
        model = torch.nn.Linear(1, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        data = TensorDataset(torch.arange(12.0).unsqueeze(1))
        model, opt, loader = session.prepare(model, opt, DataLoader(data, batch_size=4, shuffle=True))
        if load:
            session.load(load)
        seen = []
        while session.step_count < steps:
            for (x,) in loader:
                seen.append(x.squeeze(1).tolist())
                session.backward(model(x).sum())
                session.step()
                if session.step_count >= steps:
                    break
        if save:
            session.save(save)
        session.close()
        return seen

    full = run(steps=5)
    first = run(steps=2, save=tmp_path / "c")
    rest = run(steps=5, load=tmp_path / "c")
    assert first + rest == full
    assert full[0] != full[3]  # the second epoch is reshuffled


def test_scheduler_steps_with_the_optimizer_and_is_checkpointed(tmp_path):
    def make():
        session = pt.Session(grad_accum=2)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        data = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
        return session, *session.prepare(model, opt, DataLoader(data, batch_size=4), sched)

    session, model, opt, loader, sched = make()
    for x, y in loader:
        session.backward(torch.nn.functional.mse_loss(model(x), y))
        session.step()
    assert session.step_count == 2 and opt.param_groups[0]["lr"] == 0.25  # two steps, not four micro-batches
    session.save(tmp_path / "c")
    session.close()
    session, model, opt, loader, sched = make()
    session.load(tmp_path / "c")
    assert session.step_count == 2 and sched.last_epoch == 2 and opt.param_groups[0]["lr"] == 0.25
    session.close()


def _scheduled(scheduler_factory):
    session = pt.Session()
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    data = TensorDataset(torch.randn(16, 2), torch.randn(16, 1))
    return session, *session.prepare(model, opt, DataLoader(data, batch_size=4), scheduler_factory(opt))


def test_a_scheduler_the_script_steps_as_well_is_said_once(capfd):
    session, model, _, loader, sched = _scheduled(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0))
    for x, y in loader:
        session.backward(torch.nn.functional.mse_loss(model(x), y))
        session.step()
        sched.step()  # the double step the README warns about
    session.close()
    assert sched.last_epoch == 8  # 4 optimizer steps, stepped twice each: the script's choice, kept
    said = [ln for ln in capfd.readouterr().err.splitlines() if "also stepped outside session.step()" in ln]
    assert len(said) == 1 and "remove your own scheduler.step()" in said[0]


def test_a_scheduler_only_session_steps_is_not_warned_about(capfd):
    session, model, _, loader, sched = _scheduled(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0))
    for x, y in loader:
        session.backward(torch.nn.functional.mse_loss(model(x), y))
        session.step()
    session.close()
    assert sched.last_epoch == 4 and "outside session.step()" not in capfd.readouterr().err


def test_a_metric_driven_scheduler_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="ReduceLROnPlateau") as info:
        _scheduled(torch.optim.lr_scheduler.ReduceLROnPlateau)
    assert "scheduler.step(metric) yourself" in info.value.one_line()


def test_script_options_that_disagree_with_the_launcher_are_an_error(monkeypatch):
    monkeypatch.setenv("PARATRAIN_STRATEGY", "fsdp")
    monkeypatch.setenv("PARATRAIN_METHOD_OPTIONS", '{"shard": "full"}')
    with pytest.raises(ConfigError, match="launched with --strategy fsdp"):
        pt.Session("fsdp:shard=grad_op")


def test_unknown_reduce_op_is_caught_in_one_process_too():
    session = pt.Session()
    with pytest.raises(ConfigError, match='"avg" is not one of'):
        session.all_reduce(1.0, op="avg")
    session.close()
