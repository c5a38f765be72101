"""Training options that mean the same under every method: precision, gradient clipping, compile, seed, gradient
accumulation and the batch convention.

Why one dataclass: users switch methods to compare them, so an option must not change meaning when they do (a
method's own default — DeepSpeed clips at 1.0 — must not leak in), and it must be said in one place. ``Session(...)``,
``paratrain run`` flags and ``paratrain.toml`` all map onto :class:`TrainOptions`; the launcher hands its values to
the workers in one environment variable, and a value the script sets differently is an error, not a silent winner.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from paratrain import ac_modes
from paratrain.distenv import TRAIN_VAR
from paratrain.errors import ConfigError, did_you_mean

PRECISIONS = ("fp32", "bf16-mixed", "fp16-mixed", "bf16-true")


def _option(default: Any, flag: str, help: str, metavar: str | None = None) -> Any:
    """A field with the ``paratrain run`` flag that sets it and the one sentence that explains it — the only place
    either is written: the CLI's flags, ``paratrain.toml``'s keys, ``Session(...)``'s arguments and this class's
    docs are all made from these fields. ``metavar``: the flag takes a string value named so (else its type's)."""
    metadata = {"flag": flag, "help": help, **({"metavar": metavar} if metavar else {})}
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """The training options; each field's help says what it does (see :func:`describe`)."""

    precision: str = _option(
        "fp32", "--precision",
        "fp32 (default), bf16-mixed (autocast, or FSDP's mixed-precision policy), fp16-mixed (autocast + a "
        "gradient scaler; GPUs only) or bf16-true (the model itself in bf16), the same under every method.")
    grad_clip: float | None = _option(
        None, "--grad-clip", "Clip the global gradient norm to this value before each optimizer step "
                             "(default: never; a method's own default, such as DeepSpeed's 1.0, never leaks in).")
    compile: bool | str = _option(
        False, "--compile", "torch.compile the model (single, ddp, fsdp); true means inductor, a string in "
                            "paratrain.toml or Session(compile=...) names the backend.")
    seed: int | None = _option(
        None, "--seed", "Seed Python, NumPy, torch and the loader's shuffle identically on every rank "
                        "(default: leave them alone; the shuffle then uses 0).")
    grad_accum: int = _option(
        1, "--grad-accum", "Micro-batches per rank per optimizer step (default 1); never changes the math.")
    per_rank_batch: bool = _option(
        False, "--per-rank-batch", "Read the loader's batch size as per rank, not global.")
    sync_batchnorm: bool = _option(
        True, "--sync-batchnorm/--no-sync-batchnorm",
        "BatchNorm → SyncBatchNorm under multi-process methods on GPUs (default on: the statistics of one "
        "process; off keeps per-rank statistics and saves an all-reduce per layer per forward).")
    activation_checkpointing: bool | str = _option(
        False, "--activation-checkpointing",
        "Recompute activations in backward instead of keeping them: full (the flag alone; true in Session or "
        "paratrain.toml) keeps only each "
        "transformer block's input; op also keeps the outputs of every other matrix multiply and of attention "
        "(torchtitan's selective policy); every:N checkpoints every N-th block fully; none (or "
        "--no-activation-checkpointing) keeps all. Less activation memory, more forward work, the same numbers "
        "(blocks: the elements of an nn.ModuleList, the blocks fsdp shards one by one).", metavar="MODE")

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
        # False or the mode's spelling ("full", "op", "every:N"): True and "none" are read as before modes existed
        object.__setattr__(self, "activation_checkpointing", ac_modes.parse(self.activation_checkpointing))
        for name in ("per_rank_batch", "sync_batchnorm"):
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
FLAGS = {f.name: f.metadata["flag"] for f in dataclasses.fields(TrainOptions)}


def value_types(name: str, owner: type = TrainOptions) -> tuple[type, ...]:
    """The types field ``name`` of the dataclass ``owner`` (an option by default) accepts, from its annotation
    (``float | None`` → ``(float,)``), for the CLI and for type errors in ``paratrain.toml``."""
    import types
    import typing

    hint = typing.get_type_hints(owner)[name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return tuple(a for a in args if a is not type(None))


def describe(names: tuple[str, ...] = FIELDS) -> str:
    """One line per option — its name, flag and help — for docstrings made from the fields."""
    fields = {f.name: f for f in dataclasses.fields(TrainOptions)}
    return "\n".join(f"``{n}`` ({fields[n].metadata['flag'].split('/')[0]}): {fields[n].metadata['help']}"
                     for n in names)


TrainOptions.__doc__ = f"{TrainOptions.__doc__}\n\n{describe()}"


def as_keywords(function: Callable[..., Any]) -> Callable[..., Any]:
    """Show ``function``'s ``**options`` as one keyword argument per option (default None: not given here) to
    ``help()``, ``inspect`` and editors that read signatures, and list them in its docstring — ``Session(...)``
    takes the options without writing them again."""
    signature = inspect.signature(function)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    hints = {f.name: f.type for f in dataclasses.fields(TrainOptions)}
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=hints[name] if "None" in str(hints[name]) else f"{hints[name]} | None")
               for name in FIELDS]
    function.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    function.__doc__ = f"{function.__doc__ or ''}\n\nTraining options:\n\n{describe()}"
    return function


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The options actually set (not None), after checking each name; validates them together."""
    out = {k: v for k, v in values.items() if v is not None}
    for key in out:
        if key not in FIELDS:
            raise ConfigError(f'unknown training option "{key}".{did_you_mean(key, FIELDS)}',
                              hint=f"options: {', '.join(FIELDS)}")
    if "activation_checkpointing" in out:  # one spelling per mode: Session(...=True) agrees with the flag's "full"
        out["activation_checkpointing"] = ac_modes.parse(out["activation_checkpointing"])
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
