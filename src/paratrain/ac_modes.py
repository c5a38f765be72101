"""Activation checkpointing's modes, spelled and read the same by ``Session(...)``, ``paratrain run``/``compare``
flags, ``paratrain.toml`` and ``paratrain advise``.

Why one small module without torch: the options (checked in the launcher before torch loads), advise's memory model
and the CLI each read the value, and a mode that meant "every second block" in one place and "every block" in
another would make advise's prediction a guess about a run it does not describe. The modes are torchtitan's:

- ``full``: every transformer block keeps only its input and recomputes the rest in backward;
- ``op`` (selective per op): every block also keeps the outputs of its expensive ops — every other matrix
  multiply, the fused attention, the reductions — and recomputes only the cheap ones (norms, activations, casts);
- ``every:N``: every N-th block (the N-th, 2N-th, …) is checkpointed fully; the others store all they save.

The normalized value is ``False`` (none) or the mode's string, so that ``if options.activation_checkpointing``
keeps meaning "some checkpointing".
"""

from __future__ import annotations

import re

from paratrain.errors import ConfigError

MODES = ("none", "full", "op", "every:N")
SPELLINGS = "none, full, op or every:N (checkpoint every N-th block, N ≥ 1)"
_EVERY = re.compile(r"every:([0-9]+)")

Mode = bool | str  # False (none) or "full" | "op" | "every:N" once normalized


def parse(value: object) -> Mode:
    """``value`` as a mode: ``False`` for none (``None``, ``False``, "none"), "full" for ``True`` (the boolean the
    option was before it had modes), else the mode's own spelling. Anything else is one ConfigError naming them."""
    if value is None or value is False:
        return False
    if value is True:
        return "full"
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "none":
            return False
        if text in ("full", "op"):
            return text
        match = _EVERY.fullmatch(text)
        if match and int(match.group(1)) >= 1:
            return f"every:{int(match.group(1))}"
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    raise ConfigError(f"activation checkpointing {shown} is not a mode: {SPELLINGS}")


def every(mode: Mode) -> int | None:
    """N of ``every:N``, or None for the other modes."""
    match = _EVERY.fullmatch(mode) if isinstance(mode, str) else None
    return int(match.group(1)) if match else None


def checkpointed(mode: Mode, blocks: int) -> list[bool]:
    """Which of ``blocks`` blocks, in forward order, ``mode`` checkpoints: all for full and op, the N-th, 2N-th, …
    for every:N (torchtitan's ``ac_freq``: counting from 1), none for none."""
    mode = parse(mode)
    if not mode:
        return [False] * blocks
    n = every(mode) or 1
    return [(i + 1) % n == 0 for i in range(blocks)]


def name(mode: Mode) -> str:
    """The mode as a user writes it ("none" for False)."""
    mode = parse(mode)
    return mode if isinstance(mode, str) else "none"


def words(mode: Mode) -> str:
    """What the mode does, for advise's header and the Session's notice."""
    mode = parse(mode)
    if not mode:
        return "no activation checkpointing"
    if mode == "full":
        return "full activation checkpointing"
    if mode == "op":
        return "selective (per-op) activation checkpointing"
    n = every(mode) or 1
    return "activation checkpointing of every block" if n == 1 else \
        f"activation checkpointing of every {_ordinal(n)} block"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
