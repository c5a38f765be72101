"""The training options' flags, made from :class:`paratrain.options.TrainOptions` instead of written per command.

Why: an option written by hand in each command drifted (``sync_batchnorm`` once reached the toml file but not
``Session()``). A command declares ``**train`` and is decorated with :func:`train_flags`; typer reads the flags from
the signature this puts on it, and calls the command with each given option in ``train`` (None: not given).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from paratrain import options

F = TypeVar("F", bound=Callable[..., Any])


def _parameter(field: dataclasses.Field[Any], prefix: str) -> inspect.Parameter:
    text = field.metadata["help"]
    word = text.split()[0]
    if prefix and word[0].isupper() and word[1:].islower():  # "Every cell: keep only…", but "…: BatchNorm…"
        text = text[0].lower() + text[1:]
    metavar = field.metadata.get("metavar")  # a flag with a value of its own (cli/_optional_values.py)
    kind = str if metavar else options.value_types(field.name)[0]  # else bool for compile's bool | str
    option = typer.Option(None, *field.metadata["flag"].split(" "), help=prefix + text, metavar=metavar,
                          show_default=False, rich_help_panel="Training options (the same under every method)")
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)


def train_flags(names: tuple[str, ...] = options.FIELDS, *, prefix: str = "") -> Callable[[F], F]:
    """Give the decorated command (whose signature ends in ``**train``) a flag per training option in ``names``,
    placed where ``**train`` stands; ``prefix`` starts each help (compare: "Every cell: ")."""
    fields = {f.name: f for f in dataclasses.fields(options.TrainOptions)}

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        params += [_parameter(fields[name], prefix) for name in names]
        command.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        return command

    return decorate
