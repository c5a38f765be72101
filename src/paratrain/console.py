"""The reporting layer: the only place library code writes to the terminal.

Messages go to stderr so a user's own stdout stays clean; ``notice`` prints on the main rank only and at most once
per text, so a message from a per-rank code path never appears N times.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.markup import escape

# Piped or logged output is not limited to 80 columns (rich's default off a terminal): tables stay readable.
_WIDTH = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)
out = Console(highlight=False, soft_wrap=True, width=_WIDTH)
_seen: set[str] = set()


def _is_main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


def notice(text: str, *, once: bool = True, all_ranks: bool = False) -> None:
    """A one-line note from paratrain (not the user's output), e.g. 'dp: no GPU here, running as one process'."""
    if not all_ranks and not _is_main_rank():
        return
    if once and text in _seen:
        return
    _seen.add(text)
    err.print(f"[dim]paratrain:[/dim] {escape(text)}")


def user_print(*args: object, **kwargs: object) -> None:
    """The user's own output (Session.print): plain print, flushed, so ordering with other output is kept."""
    kwargs.setdefault("flush", True)
    print(*args, **kwargs)
    sys.stdout.flush()
