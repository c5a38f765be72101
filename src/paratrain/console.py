"""The reporting layer: the only place library code writes to the terminal.

Messages go to stderr so a user's own stdout stays clean; ``notice`` prints on the main rank only and at most once
per text, so a message from a per-rank code path never appears N times.

``err`` and ``out`` are made on first use: importing rich costs every training process and every `paratrain run`
about 40 ms of start-up, and most of them never print through it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    err: Console
    out: Console

_consoles: dict[str, Any] = {}
_seen: set[str] = set()


def _make(stderr: bool) -> Console:
    """rich's Console, but 160 columns instead of 80 when writing to a pipe or log with no COLUMNS set.

    At 80 columns rich folds wide tables into unreadable slivers; a terminal's real width, or an explicit
    COLUMNS, still wins, and nothing is written to the environment that launched scripts inherit.
    """
    from rich.console import Console, ConsoleDimensions

    class _Console(Console):
        @property
        def size(self) -> ConsoleDimensions:
            dims = Console.size.fget(self)
            if not self.is_terminal and "COLUMNS" not in os.environ:
                return ConsoleDimensions(160, dims.height)
            return dims

        @size.setter
        def size(self, new_size: tuple[int, int]) -> None:
            Console.size.fset(self, new_size)

    return _Console(stderr=stderr, highlight=False, soft_wrap=True)


def _console(name: str) -> Console:
    # rich fixes the width from COLUMNS when a Console is made: a changed COLUMNS gets a new one.
    key = f"{name}:{os.environ.get('COLUMNS')}"
    if key not in _consoles:
        _consoles[key] = _make(stderr=name == "err")
    return _consoles[key]


def __getattr__(name: str) -> Any:
    if name in ("err", "out"):
        return _console(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def escape(text: str) -> str:
    """rich's markup escape, imported when first needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _is_main_rank() -> bool:
    return os.environ.get("RANK", "0") == "0"


def notice(text: str, *, once: bool = True, all_ranks: bool = False) -> None:
    """A one-line note from paratrain (not the user's output), e.g. 'dp: no GPU here, running as one process'."""
    if not all_ranks and not _is_main_rank():
        return
    if once and text in _seen:
        return
    _seen.add(text)
    _console("err").print(f"[dim]paratrain:[/dim] {escape(text)}")


def user_print(*args: object, **kwargs: object) -> None:
    """The user's own output (Session.print): plain print, flushed, so ordering with other output is kept."""
    kwargs.setdefault("flush", True)
    print(*args, **kwargs)
    sys.stdout.flush()


@contextlib.contextmanager
def stderr_without(noise: Callable[[bytes], bool]) -> Iterator[None]:
    """Run the block with the process's stderr (file descriptor 2, where C++ libraries write) in a temporary file,
    then pass on every line of it but those ``noise`` names: a library's start-up chatter goes, a user's line stays."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().splitlines(keepends=True) if not noise(line)]
            if kept:
                os.write(2, b"".join(kept))
