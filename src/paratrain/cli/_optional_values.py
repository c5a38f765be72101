"""Options whose value may be left out: ``--activation-checkpointing`` (run, compare) and ``--checkpointing``
(advise) alone mean ``full``, as they did when they were on/off flags, and ``--activation-checkpointing op`` or
``every:2`` picks a mode; ``--no-activation-checkpointing`` still means none.

Why a pass over the arguments before click parses them: click reads an option's value from the next token,
whatever it is (``--activation-checkpointing train.py`` would take the script for the mode), and typer has no
option with an optional value. So a bare flag gets its value written after it, when the next token is not a mode,
and the negative flag becomes the option with ``none``. Only the command's own options are touched: the pass follows
the command's parameters (an option that takes a value skips that value), and stops at ``--`` and, for ``run``, at
the script, after which every argument is the script's.
"""

from __future__ import annotations

from typing import Any

# The option, and the value it has when given alone.
BARE = {"--activation-checkpointing": "full", "--checkpointing": "full"}
# The negative flag, and what it becomes.
NEGATIVE = {"--no-activation-checkpointing": ("--activation-checkpointing", "none")}


def _is_mode(token: str) -> bool:
    """A token meant as the mode (a malformed ``every:x`` included, so that it reaches the mode's own error)."""
    text = token.lower()
    return text in ("none", "full", "op") or text.startswith("every:")


def expand(args: list[str], group: Any) -> list[str]:
    """``args`` (a whole ``paratrain`` command line, without the program; ``group``: the app's click group) with
    each bare optional-value flag of the command given its value, and each negative flag spelled as the option with
    ``none``."""
    out = list(args)
    at = next((i for i, token in enumerate(out) if not token.startswith("-")), None)
    commands = getattr(group, "commands", {})
    if at is None or out[at] not in commands:
        return out
    command = commands[out[at]]
    valued = {name for param in command.params if getattr(param, "param_type_name", "") == "option"
              and not param.is_flag and not param.count for name in param.opts}  # typer's own click: no isinstance
    interspersed = command.context_settings.get("allow_interspersed_args", True)
    i = at + 1
    while i < len(out):
        token = out[i]
        if token == "--":
            break
        if token in NEGATIVE and NEGATIVE[token][0] in valued:
            out[i:i + 1] = list(NEGATIVE[token])
            i += 2
        elif token in BARE and token in valued:
            if i + 1 >= len(out) or not _is_mode(out[i + 1]):
                out.insert(i + 1, BARE[token])
            i += 2
        elif token in valued:
            i += 2
        elif not token.startswith("-") and not interspersed:
            break
        else:
            i += 1
    return out
