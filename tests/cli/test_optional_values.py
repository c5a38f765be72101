"""Flags whose value may be left out (cli/_optional_values.py): bare means full, a mode after it is the mode, the
negative flag is none, and nothing after a `run` script is touched."""

from __future__ import annotations

import json

import pytest
import typer

from paratrain.cli import main as entry
from paratrain.cli._optional_values import expand


@pytest.fixture(scope="module")
def group():
    entry._register(["run"])
    entry._register(["compare"])
    entry._register(["advise"])
    return typer.main.get_command(entry.app)


@pytest.mark.parametrize(("given", "read"), [
    (["run", "--activation-checkpointing", "t.py"], ["run", "--activation-checkpointing", "full", "t.py"]),
    (["run", "--activation-checkpointing", "op", "t.py"], ["run", "--activation-checkpointing", "op", "t.py"]),
    (["run", "-s", "ddp", "--activation-checkpointing", "every:2", "t.py"],
     ["run", "-s", "ddp", "--activation-checkpointing", "every:2", "t.py"]),
    (["run", "--activation-checkpointing=op", "t.py"], ["run", "--activation-checkpointing=op", "t.py"]),
    (["run", "--no-activation-checkpointing", "t.py"], ["run", "--activation-checkpointing", "none", "t.py"]),
    (["--debug", "run", "-n", "2", "--activation-checkpointing"],
     ["--debug", "run", "-n", "2", "--activation-checkpointing", "full"]),
    # after the script everything is the script's, a flag of the same name included
    (["run", "-s", "ddp", "t.py", "--activation-checkpointing"], ["run", "-s", "ddp", "t.py",
                                                                  "--activation-checkpointing"]),
    (["run", "--", "--activation-checkpointing"], ["run", "--", "--activation-checkpointing"]),
    (["compare", "-w", "gpt", "--activation-checkpointing", "-s", "ddp"],
     ["compare", "-w", "gpt", "--activation-checkpointing", "full", "-s", "ddp"]),
    (["advise", "--checkpointing", "--gpus", "2"], ["advise", "--checkpointing", "full", "--gpus", "2"]),
    (["advise", "--gpus", "2", "--checkpointing"], ["advise", "--gpus", "2", "--checkpointing", "full"]),
    (["advise", "--checkpointing", "every:x"], ["advise", "--checkpointing", "every:x"]),  # its own error follows
    (["advise", "--activation-checkpointing"], ["advise", "--activation-checkpointing"]),  # not advise's flag
    (["gpus", "--json"], ["gpus", "--json"]),
])
def test_a_bare_flag_is_given_its_value(group, given, read):
    assert expand(given, group) == read


def test_run_reads_each_spelling(capsys, tmp_path):
    """Through the entry point: the launcher hands the mode to the workers (the dry run's environment)."""
    script = tmp_path / "t.py"
    script.write_text("")
    for flags, mode in ((["--activation-checkpointing"], "full"), (["--activation-checkpointing", "op"], "op"),
                        (["--no-activation-checkpointing"], False)):
        assert entry.main(["run", "--dry-run", "--json", "-s", "single", *flags, str(script)]) == 0
        plan = json.loads(capsys.readouterr().out)
        assert json.loads(plan["env"]["PARATRAIN_TRAIN"]) == {"activation_checkpointing": mode}


def test_help_names_the_modes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    assert entry.main(["run", "--help"]) == 0
    text = capsys.readouterr().out
    assert "--activation-checkpointing" in text and "MODE" in text
    for word in ("full", "op", "every:N", "none", "--no-activation-checkpointing)"):
        assert word in text.split(), word
