"""The launch plan, in-process and fast: every registered method is planned by its own launcher with the contract
its workers read (tests/launcher/test_run.py runs the same through the CLI, end to end)."""

from __future__ import annotations

import json
import os

import pytest

from paratrain.distenv import METHOD_OPTIONS_VAR, NPROC_VAR, STRATEGY_VAR, DistEnv
from paratrain.errors import ConfigError
from paratrain.launcher.config import RunConfig
from paratrain.launcher.plan import build_plan
from paratrain.strategies import registry
from paratrain.strategies.base import format_spec
from tests.helpers.launch import ROOT, SESSION_TRAIN

KERAS = ROOT / "examples" / "keras_train.py"
SPECS = [spec for e in registry.entries() if e.implemented for spec in (e.compare_specs or (str(e.method),))]


@pytest.mark.parametrize("spec", SPECS)
def test_every_method_is_planned_by_its_launcher(spec):
    entry = registry.info(spec.partition(":")[0])
    if not registry.availability(entry.method).ok and os.environ.get("CI") != "true":
        pytest.skip(f"{entry.method} is not available here")
    nproc = 2 if entry.multi_process or entry.framework == "tensorflow" else 1
    script = KERAS if entry.framework == "tensorflow" else SESSION_TRAIN
    plan = build_plan(RunConfig(strategy=spec, nproc=nproc, script=str(script)))
    assert plan.launcher == entry.launcher and plan.backend.name == entry.launcher
    assert plan.env[STRATEGY_VAR] == str(entry.method) and plan.env[NPROC_VAR] == str(nproc)
    cls, options = registry.resolve(spec)
    assert plan.spec == format_spec(cls.method, options)  # the canonical spelling
    sent = DistEnv.from_environ(plan.env).options  # what a worker will read back
    assert registry.resolve(str(entry.method), sent)[1] == options
    assert str(script) in plan.command_line()
    assert plan.world_size == (nproc if entry.multi_process else 1)


def test_method_options_reach_the_workers_as_one_value():
    plan = build_plan(RunConfig(strategy="fsdp:shard=grad_op", nproc=2, script=str(SESSION_TRAIN)))
    assert json.loads(plan.env[METHOD_OPTIONS_VAR])["shard"] == "grad_op"
    assert not any(k.startswith("PARATRAIN_SHARD") for k in plan.env)


@pytest.mark.parametrize(("config", "words"), [
    ({"strategy": "single", "nproc": 2}, "single runs as one process"),
    ({"strategy": "ddp", "nnodes": 2}, "needs --master HOST:PORT"),
    ({"strategy": "ddp", "max_restarts": -1}, "--max-restarts -1 must be 0 or more"),
])
def test_what_a_launcher_cannot_honour_is_one_line_before_any_process(config, words):
    with pytest.raises(ConfigError, match=words):
        build_plan(RunConfig(script=str(SESSION_TRAIN), **config))
