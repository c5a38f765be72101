"""Training options that mean the same under every method: precision, gradient clipping, compile, seed, gradient
accumulation and the batch convention.

Why one dataclass: users switch methods to compare them, so an option must not change meaning when they do (a
method's own default — DeepSpeed clips at 1.0 — must not leak in), and it must be said in one place. ``Session(...)``,
``paratrain run`` flags and ``paratrain.toml`` all map onto :class:`TrainOptions`; the launcher hands its values to
the workers in one environment variable, and a value the script sets differently is an error, not a silent winner.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paratrain.distenv import TRAIN_VAR
from paratrain.errors import ConfigError, did_you_mean

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-true")
FLAGS = {"precision": "--precision", "grad_clip": "--grad-clip", "compile": "--compile", "seed": "--seed",
         "grad_accum": "--grad-accum", "per_rank_batch": "--per-rank-batch",
         "sync_batchnorm": "--sync-batchnorm/--no-sync-batchnorm",
         "activation_checkpointing": "--activation-checkpointing"}


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """``precision``: fp32 | bf16-mixed (autocast, or FSDP's mixed-precision policy) | fp16-mixed (autocast + a
    gradient scaler; GPUs only) | bf16-true (the model itself in bf16). ``grad_clip``: clip the global gradient norm
    to this value before each optimizer step (None: never). ``compile``: ``torch.compile`` the model (True:
    inductor; a string names the backend). ``seed``: seed Python, NumPy and torch identically on every rank (None:
    leave them alone; the loader's shuffle then uses 0). ``grad_accum``: micro-batches per optimizer step.
    ``per_rank_batch``: read the loader's batch size as per rank instead of global. ``sync_batchnorm``: under
    multi-process methods on GPUs, BatchNorm layers become ``SyncBatchNorm`` (statistics over the global batch, as
    one process computes them); False keeps per-rank statistics, which saves one all-reduce per layer per forward.
    ``activation_checkpointing``: keep only each transformer block's input for backward (every element of an
    ``nn.ModuleList``, the blocks fsdp shards one by one) and recompute the rest during backward — less activation
    memory for one more forward per block, the same numbers."""

    precision: str = "fp32"
    grad_clip: float | None = None
    compile: bool | str = False
    seed: int | None = None
    grad_accum: int = 1
    per_rank_batch: bool = False
    sync_batchnorm: bool = True
    activation_checkpointing: bool = False

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f'precision "{self.precision}" is not one of {", ".join(PRECISIONS)}.'
                              f"{did_you_mean(str(self.precision), PRECISIONS)}")
        if self.grad_clip is not None and (isinstance(self.grad_clip, bool) or not isinstance(self.grad_clip,
                                                                                                (int, float))
                                           or not math.isfinite(self.grad_clip) or self.grad_clip <= 0):
            raise ConfigError(f"grad_clip={self.grad_clip!r} must be a positive number (the max global norm)",
                              hint="e.g. --grad-clip 1.0; leave it out to never clip")
        if not isinstance(self.compile, (bool, str)) or self.compile == "":
            raise ConfigError(f"compile={self.compile!r} must be true/false or a torch.compile backend name")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**32):
            raise ConfigError(f"seed={self.seed!r} must be an integer between 0 and 2**32-1")
        if isinstance(self.grad_accum, bool) or not isinstance(self.grad_accum, int) or self.grad_accum < 1:
            raise ConfigError(f"grad_accum={self.grad_accum} must be 1 or more")
        for name in ("per_rank_batch", "sync_batchnorm", "activation_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be true or false")

    @property
    def compile_backend(self) -> str | None:
        if self.compile is False:
            return None
        return "inductor" if self.compile is True else str(self.compile)

    @property
    def mixed(self) -> bool:
        return self.precision.endswith("-mixed")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = tuple(f.name for f in dataclasses.fields(TrainOptions))


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The options actually set (not None), after checking each name; validates them together."""
    out = {k: v for k, v in values.items() if v is not None}
    for key in out:
        if key not in FIELDS:
            raise ConfigError(f'unknown training option "{key}".{did_you_mean(key, FIELDS)}',
                              hint=f"options: {', '.join(FIELDS)}")
    TrainOptions(**out)
    return out


def to_env(values: Mapping[str, Any]) -> dict[str, str]:
    """The worker environment carrying the launcher's options (nothing when none was given)."""
    chosen = given(values)
    return {TRAIN_VAR: json.dumps(chosen, sort_keys=True)} if chosen else {}


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    text = (os.environ if environ is None else environ).get(TRAIN_VAR)
    if not text:
        return {}
    try:
        values = json.loads(text)
    except json.JSONDecodeError:
        raise ConfigError(f"{TRAIN_VAR} is not valid JSON: {text[:80]}",
                          hint="it is set by paratrain run; unset it when starting a script by hand") from None
    return given(values)


def resolve(script: Mapping[str, Any], launcher: Mapping[str, Any]) -> TrainOptions:
    """The script's ``Session(...)`` arguments and the launcher's flags/file together; a disagreement is an error
    (as for the method), because either silent winner would surprise someone."""
    mine, theirs = given(script), given(launcher)
    for key in sorted(mine.keys() & theirs.keys()):
        if mine[key] != theirs[key]:
            raise ConfigError(
                f"Session({key}={mine[key]!r}) in the script, but paratrain run was given {FLAGS[key]} "
                f"{theirs[key]!r} (flag or paratrain.toml)",
                hint=f"drop one of them: the script's argument, or {FLAGS[key]}",
            )
    return TrainOptions(**{**theirs, **mine})
