"""What a Session settles when it starts, before any model exists: which method runs (the launcher's, or the
script's own when they agree), the seed every rank starts from, periodic checkpoints (Session arguments or the
launcher's flags, never both disagreeing), and an exception hook that keeps a failing rank from leaving the others
waiting. Apart from session.py so that the training loop's bookkeeping reads on its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from paratrain import distenv
from paratrain.distenv import DistEnv
from paratrain.errors import ConfigError, ParatrainError
from paratrain.resume import AutoCheckpoint
from paratrain.strategies import _procgroup, registry


def _differs(requested: str, env: DistEnv) -> bool:
    """Does the script's own spec (name and options) disagree with what the launcher passed?"""
    assert env.strategy is not None
    if registry.parse_spec(requested)[0] != registry.parse_spec(env.strategy)[0]:
        return True
    return registry.resolve(requested)[1] != registry.resolve(env.strategy, env.options)[1]


def seed_everything(seed: int) -> None:
    """The same seed on every rank: model initialisation, dropout streams and any random draw in the script start
    alike under every method."""
    import random

    random.seed(seed)
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def install_failure_hook() -> None:
    """An uncaught exception must make close() skip its final barrier (the other ranks may wait on this one).

    A paratrain error that reaches the top of a script started with plain ``python`` (say, ``Session("ddp")``
    without a launcher) is one line with its fix, not a traceback; ``PARATRAIN_DEBUG=1`` shows the traceback.
    """
    previous = sys.excepthook
    if getattr(previous, "_paratrain", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        _procgroup.mark_failing()
        if isinstance(exc, ParatrainError) and not distenv.debug():
            print(f"paratrain: error: {exc.one_line()}", file=sys.stderr, flush=True)
            return
        previous(kind, exc, tb)

    hook._paratrain = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def auto_checkpoint(env: DistEnv, folder: str | None, every: int | None,
                     keep: int | None) -> AutoCheckpoint | None:
    """Periodic checkpoints from Session arguments or the launcher's --checkpoint-* flags; they must not disagree."""
    for name, mine, theirs in (("checkpoint_dir", folder, env.checkpoint_dir),
                               ("checkpoint_every", every, env.checkpoint_every), ("keep", keep, env.keep)):
        if mine is not None and theirs is not None and str(mine) != str(theirs):
            raise ConfigError(f"Session({name}={mine!r}) disagrees with the launcher's --{name.replace('_', '-')} "
                              f"{theirs}", hint="set it in one place")
    folder = folder or env.checkpoint_dir
    every = every or env.checkpoint_every
    keep = keep or env.keep or 2
    if folder is None and every is None:
        return None
    if folder is None or every is None:
        raise ConfigError("periodic checkpoints need both a directory and an interval",
                          hint="give --checkpoint-dir DIR --checkpoint-every N (or both Session arguments)")
    return AutoCheckpoint(Path(folder), every, keep)


def choose_spec(requested: str | None, env: DistEnv) -> str:
    if requested and env.strategy and _differs(requested, env):
        raise ConfigError(
            f'the script asks for Session("{requested}") but was launched with --strategy {env.strategy}',
            hint="drop the argument so the launcher decides, or launch with the same --strategy",
        )
    if env.strategy:
        return env.strategy
    if requested:
        return requested
    # A native torchrun launch of a Session script: several ranks mean DDP, never independent copies.
    return "ddp" if env.launched and env.world_size > 1 else "single"
