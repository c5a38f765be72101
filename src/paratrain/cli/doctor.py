"""`paratrain doctor`: which methods can run here, why not, and the command that fixes it."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from paratrain import console
from paratrain.cli._render import print_json, styled


def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    timeout: float = typer.Option(20.0, "--timeout", min=1.0, help="Seconds allowed for each backend check."),
) -> None:
    """Check every training method: available or not, the reason, and the exact fix.

    Also prints the versions of torch, CUDA, NCCL, gloo, DeepSpeed, Horovod (with its built controllers) and
    TensorFlow. Each check has a time limit; a broken backend shows as "check failed", never breaks the report.
    """
    from paratrain.doctor import run_checks

    report = run_checks(timeout)
    if json_out:
        print_json(report.to_json())
        return
    methods = Table(title="Methods", title_justify="left")
    for col in ("method", "framework", "launcher", "status", "why / fix"):
        methods.add_column(col)
    for m in report.methods:
        why = escape(m.reason) + (f" — fix: [bold]{escape(m.fix)}[/]" if m.fix else "")
        methods.add_row(m.name, m.framework, m.launcher, styled(m.status), why)
    comps = Table(title="Backends", title_justify="left")
    for col in ("component", "version", "notes"):
        comps.add_column(col)
    for c in report.components:
        note = escape(c.detail) + (f" — fix: [bold]{escape(c.fix)}[/]" if c.fix else "")
        comps.add_row(c.name, escape(c.version) if c.version else "[dim]—[/]", note)
    console.out.print(methods)
    console.out.print(comps)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
