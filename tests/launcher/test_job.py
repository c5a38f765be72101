"""The launcher protocol: a launcher is one class and one registration; build_plan and execute need nothing else.

The toy launcher (tests/helpers/toy_launcher.py) starts real processes that form a real gloo process group; only the
way they are started is the toy's.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import job
from paratrain.launcher.config import RunConfig
from paratrain.launcher.plan import build_plan, execute
from paratrain.strategies import registry
from tests.helpers.launch import ROOT, SESSION_TRAIN
from tests.helpers.toy_launcher import ToyLauncher


@pytest.fixture
def toy(monkeypatch):
    """The toy registered as the launcher of ddp, for this test only; the job's environment is undone after."""
    launcher = ToyLauncher()
    job.register("toy", launcher)
    entry = registry.REGISTRY["ddp"]
    monkeypatch.setitem(registry.REGISTRY, "ddp", dataclasses.replace(entry, launchers=("toy",)))
    saved = dict(os.environ)  # execute() sets the job's environment in this process, as the CLI does
    yield launcher
    os.environ.clear()
    os.environ.update(saved)
    job.unregister("toy")


def test_every_builtin_launcher_implements_the_protocol():
    for name in job.BACKENDS:
        backend = job.backend(name)
        assert backend.name == name
        for method in ("plan", "shell_line", "run", "ran_line", "never_joined"):
            assert callable(getattr(backend, method)), f"{name} lacks {method}"


def test_an_unknown_launcher_is_one_line():
    with pytest.raises(ConfigError, match='no launcher "ray"'):
        job.backend("ray")


@pytest.mark.multiprocess
def test_a_registered_launcher_runs_a_method_end_to_end(toy, capsys):
    plan = build_plan(RunConfig(strategy="ddp", nproc=2, script=str(SESSION_TRAIN), args=["--steps", "3"]))
    assert plan.launcher == "toy" and plan.nproc == 2 and plan.command_line().startswith("toy-launch -n 2")
    assert execute(plan) == 0
    assert [s["RANK"] for s in toy.started] == ["0", "1"]
    err = capsys.readouterr().err
    assert "toy ran ddp on 2 of 2 ranks" in err  # both workers wrote their done note through the protocol


@pytest.mark.multiprocess
def test_a_registered_launcher_names_the_failing_rank(toy):
    script = ROOT / "tests/helpers/scripts/exit3.py"  # rank 1 of 2 exits with 3
    with pytest.raises(LaunchError, match="toy: rank 1 failed first") as info:
        execute(build_plan(RunConfig(strategy="ddp", nproc=2, script=str(script))))
    assert info.value.exit_code == 3
