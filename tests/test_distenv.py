"""Every PARATRAIN_* variable is declared once (paratrain.distenv), and the method's options travel as one value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paratrain import distenv
from paratrain.distenv import DistEnv
from paratrain.errors import ConfigError
from paratrain.run_hooks import RunHooks

ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"PARATRAIN_[A-Z][A-Z_]*[A-Z]")


def test_every_variable_the_code_and_docs_name_is_declared():
    """A variable invented in one module and read in another (or documented and read by nobody) fails here."""
    files = [*(ROOT / "src").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    named = {(m.group(0), f.relative_to(ROOT).as_posix()) for f in files if f.exists()
             for m in _NAME.finditer(f.read_text())}
    assert named, "the scan found no variable at all: the pattern or the paths are wrong"
    undeclared = sorted(f"{name} in {where}" for name, where in named if name not in distenv.ALL_VARS)
    assert not undeclared, undeclared


def test_only_distenv_spells_a_variable_in_code():
    """Everything else imports the name: a typo is an ImportError, not a setting silently never read."""
    spelled = []
    for f in (ROOT / "src").rglob("*.py"):
        if f.name == "distenv.py":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"[\"']PARATRAIN_", code):
                spelled.append(f"{f.relative_to(ROOT)}:{n}")
    assert not spelled, spelled


def test_method_options_travel_as_one_json_value():
    env = distenv.method_options_env({"shard": "grad_op", "offload": "cpu"})
    assert list(env) == [distenv.METHOD_OPTIONS_VAR]
    assert DistEnv.from_environ(env).options == {"shard": "grad_op", "offload": "cpu"}
    assert distenv.method_options_env({}) == {}


def test_a_stray_variable_in_the_shell_is_not_an_option():
    """Before, any PARATRAIN_<X> was read as option x: a leftover PARATRAIN_OFFLOAD changed fsdp and deepspeed."""
    env = DistEnv.from_environ({"PARATRAIN_OFFLOAD": "cpu", "PARATRAIN_SHARD": "none", "PARATRAIN_STRATEGY": "fsdp"})
    assert env.options == {} and env.strategy == "fsdp"


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"shard"'])
def test_a_malformed_options_value_is_one_clear_error(text):
    with pytest.raises(ConfigError, match=distenv.METHOD_OPTIONS_VAR):
        DistEnv.from_environ({distenv.METHOD_OPTIONS_VAR: text})


def test_run_hooks_round_trip_and_ignore_nonsense():
    hooks = RunHooks(max_steps=7, reseed=1, accum_split=4)
    assert RunHooks.from_environ(hooks.to_env()) == hooks
    assert RunHooks().to_env() == {}
    junk = {distenv.MAX_STEPS_VAR: "-3", distenv.ACCUM_SPLIT_VAR: "x", distenv.RESEED_VAR: ""}
    assert RunHooks.from_environ(junk) == RunHooks()
