"""What `paratrain compare` may ask of a measured run, beside the method and the training options.

Three requests, each read by the Session (and the Keras recorder) and set by compare's cells: stop after N optimizer
steps (``--steps`` on a user's script), reseed the RNGs after ``prepare`` (the seed floor: other dropout masks, the
same initial weights and data order) and split every micro-batch further (the float-order floor: the Session
multiplies its ``grad_accum``, whether it came from a flag or from the script's own ``Session(grad_accum=K)``, so
the two never conflict). They are measuring devices, not training options: no flag, toml key or Session argument
sets them, and a normal run has none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paratrain.distenv import ACCUM_SPLIT_VAR, MAX_STEPS_VAR, RESEED_VAR


def _positive(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() and int(text) > 0 else None


@dataclass(frozen=True)
class RunHooks:
    max_steps: int | None = None  # end the run after this many optimizer steps
    reseed: int | None = None  # reseed every RNG with this value once prepare() is done
    accum_split: int = 1  # split every micro-batch into this many

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> RunHooks:
        env = os.environ if environ is None else environ
        reseed = env.get(RESEED_VAR)
        return cls(max_steps=_positive(env.get(MAX_STEPS_VAR)),
                   reseed=int(reseed) if reseed and reseed.lstrip("-").isdigit() else None,
                   accum_split=_positive(env.get(ACCUM_SPLIT_VAR)) or 1)

    def to_env(self) -> dict[str, str]:
        """The variables a cell's processes get for these requests (none for the defaults)."""
        env = {}
        if self.max_steps:
            env[MAX_STEPS_VAR] = str(self.max_steps)
        if self.reseed is not None:
            env[RESEED_VAR] = str(self.reseed)
        if self.accum_split > 1:
            env[ACCUM_SPLIT_VAR] = str(self.accum_split)
        return env
