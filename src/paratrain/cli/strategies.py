"""`paratrain strategies`: every method paratrain knows, how it is launched and when to use it."""

from __future__ import annotations

import dataclasses
import typing

import typer
from rich.markup import escape
from rich.table import Table

from paratrain import console
from paratrain.cli._render import print_json


def _options_text(entry) -> str:
    if not entry.implemented:
        return ""
    opts = entry.load().options_type
    parts = []
    for f in dataclasses.fields(opts):
        hint = typing.get_type_hints(opts)[f.name]
        choices = typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()
        parts.append(f"{f.name}={'|'.join(map(str, choices)) or f.type} (default {f.default})")
    short = getattr(opts, "shorthands", None) or {}
    if short:  # `deepspeed:zero3` reads better than `deepspeed:zero_stage=3`: say that both work
        parts.append("shorthands " + ", ".join(
            f"{name} = {','.join(f'{k}={v}' for k, v in values.items())}" for name, values in short.items()))
    return "; ".join(parts)


def strategies(json_out: bool = typer.Option(False, "--json", help="Print the list as JSON.")) -> None:
    """List the training methods: framework, launcher, options and one line on when to use each.

    Use a name with `paratrain run --strategy NAME`; options go after a colon, e.g. `fsdp:shard=grad_op`.
    """
    from paratrain.strategies.registry import entries

    rows = [{"name": str(e.method), "framework": e.framework, "frameworks": e.frameworks, "launcher": str(e.launcher),
             "implemented": e.implemented, "options": _options_text(e), "when": e.summary}
            for e in entries()]
    if json_out:
        print_json(rows)
        return
    table = Table()
    for col in ("method", "framework", "launcher", "options", "when to use"):
        table.add_column(col)
    for r in rows:
        name = r["name"] if r["implemented"] else f"[dim]{r['name']} (not implemented)[/]"
        table.add_row(name, r["frameworks"], r["launcher"], escape(r["options"]), escape(r["when"]))
    console.out.print(table)


def register(app: typer.Typer) -> None:
    app.command("strategies")(strategies)
