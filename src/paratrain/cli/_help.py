"""The class every command is built with, so that its ``--help`` shows each flag name whole in an 80-column terminal.

Why: typer's rich help puts a boolean flag's two forms in two columns side by side (``--activation-checkpointing``
and ``--no-activation-checkpointing``, 55 characters together), and rich, short of room, cut both with an ellipsis
(``--activation-checkp…``), the one thing a user reads the help for. typer has no setting for those columns, so
for the help only each such flag is shown with its forms one under the other in the first column; parsing uses
the command's own parameters, which are never changed.
"""

from __future__ import annotations

import copy
from typing import Any

import click
from typer.core import TyperCommand


class Command(TyperCommand):
    """typer's command, its help rendered from copies of its parameters with each ``--x``/``--no-x`` pair stacked."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        own = self.params
        self.params = [_stacked(param) for param in own]
        try:
            super().format_help(ctx, formatter)
        finally:
            self.params = own


def _stacked(param: click.Parameter) -> Any:
    """``param`` itself, or for a flag with a long negative form a copy whose one long name is both forms on two
    lines (typer puts every long name of ``opts`` in the first column and ``secondary_opts`` in a column of its own)."""
    negatives = [opt for opt in param.secondary_opts if opt.startswith("--")]
    if not negatives:
        return param
    shown = copy.copy(param)
    longs = [opt for opt in param.opts if opt.startswith("--")]
    shown.opts = ["\n".join(longs + negatives)] + [opt for opt in param.opts if not opt.startswith("--")]
    shown.secondary_opts = [opt for opt in param.secondary_opts if not opt.startswith("--")]
    return shown
