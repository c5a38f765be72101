"""Entry point: the typer app, global flags, and the one place errors become one-line messages."""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import typer
from typer.core import TyperCommand

from paratrain import __version__, console, distenv, exiting
from paratrain.cli import _optional_values
from paratrain.cli._help import Command
from paratrain.errors import ParatrainError


class _App(typer.Typer):
    """typer's app whose commands show every flag name whole in their --help (cli/_help.py), unless one names its
    own class."""

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or Command, **kwargs)


app = _App(
    name="paratrain",
    help="Train one script under every parallel method (DataParallel, DDP, FSDP, DeepSpeed, Horovod, "
    "tf.distribute), compare them on your machine, and pick one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"paratrain {__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks instead of one-line errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    _state["debug"] = debug or distenv.debug()
    if _state["debug"]:
        os.environ[distenv.DEBUG_VAR] = "1"  # launched workers show full tracebacks too


COMMANDS = {"gpus": "gpus", "doctor": "doctor", "strategies": "strategies", "run": "run", "compare": "compare",
            "history": "history", "report": "history",
            "advise": "advise", "setup": "setup"}  # command -> the cli module that registers it
_registered: set[str] = set()


def _register(args: list[str]) -> None:
    """Import only the module of the command being run (all of them for --help or a typo): `paratrain run` starts
    a training job, and every module it does not need is start-up time the job pays."""
    import importlib

    first = next((a for a in args if not a.startswith("-")), None)
    wanted = [COMMANDS[first]] if first in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in wanted:
        if name not in _registered:
            importlib.import_module(f"paratrain.cli.{name}").register(app)
            _registered.add(name)


def _fail(text: str, code: int) -> int:
    console.err.print(f"[bold red]paratrain: error:[/bold red] {console.escape(text)}", markup=True, highlight=False)
    return code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        exiting.check_signals()  # one noted while the command line imported (paratrain/cli/__init__.py)
        _register(args)
        command = typer.main.get_command(app)
        args = _optional_values.expand(args, command)  # --activation-checkpointing alone: full
        # What typer's main() does, less its handling of Ctrl-C: it would return a bare 130 and print nothing
        with command.make_context("paratrain", args) as ctx:
            rv = command.invoke(ctx)
        if callable(rv):  # a command that launches a job returns it, to run here with a short call stack
            rv = rv()
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # usage errors: unknown command, unknown flag, bad value
        if not exc.format_message().strip():  # a bare `paratrain`: the help was the answer
            return getattr(exc, "exit_code", 2) or 2
        ctx = getattr(exc, "ctx", None)
        where = f"{ctx.command_path} --help" if ctx is not None else "paratrain --help"
        return _fail(f"{exc.format_message()} (see `{where}`)", getattr(exc, "exit_code", 2) or 2)
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted by SIGINT", 130)
    except exiting.Terminated:
        return _fail("interrupted by SIGTERM", 143)
    except ParatrainError as exc:
        if _state["debug"]:
            traceback.print_exc()
        return _fail(exc.one_line(), exc.exit_code)
    except Exception as exc:
        if _state["debug"]:
            raise
        return _fail(f"{type(exc).__name__}: {exc} (this is a bug in paratrain; rerun with --debug and report it)",
                     1)
    return rv if isinstance(rv, int) else 0


def entry() -> None:
    exiting.stop_on_signals()
    sys.exit(main())


if __name__ == "__main__":
    entry()
