"""Every command's --help, in an 80-column terminal, shows each of its flag names whole: rich cut the two forms of a
boolean flag, side by side, to ``--activation-checkp…``."""

from __future__ import annotations

import re

import pytest
import typer

from paratrain.cli import main
from tests.helpers.launch import paratrain, worker_env

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _commands() -> dict[str, typer.core.TyperCommand]:
    main._register(["--help"])  # every command's module, as `paratrain --help` loads them
    return typer.main.get_command(main.app).commands


@pytest.mark.parametrize("name", sorted(main.COMMANDS))
def test_every_flag_name_is_whole_in_80_columns(name):
    command = _commands()[name]
    flags = [opt for param in command.params for opt in (*param.opts, *param.secondary_opts) if opt.startswith("--")]
    assert flags, name
    env = {k: v for k, v in worker_env(COLUMNS="80").items() if k not in ("TERMINAL_WIDTH", "FORCE_COLOR")}
    proc = paratrain(name, "--help", env=env)
    assert proc.returncode == 0, proc.stderr
    out = ANSI.sub("", proc.stdout)
    assert max(len(line) for line in out.splitlines()) <= 80  # rendered at the terminal's width, not wider
    names = set(re.findall(r"--[\w-]+", out))
    missing = [flag for flag in flags if flag not in names]
    assert not missing, f"{name} --help at 80 columns cuts {missing}:\n{out}"
