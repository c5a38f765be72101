"""The Strategy protocol, method names, availability and spec parsing.

Every training method is one small class behind :class:`Strategy`; nothing else in paratrain branches on a method
name. Optional abilities are separate mixins (:class:`BackwardSyncControl`) rather than flags, so a method declares
what it can do by what it inherits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import typing
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from paratrain.errors import ConfigError, UnknownStrategyError, did_you_mean

if TYPE_CHECKING:
    import torch

    from paratrain.distenv import DistEnv


class Method(str, enum.Enum):
    """Registry keys. Compared by value, never by substring."""

    SINGLE = "single"
    DP = "dp"
    DDP = "ddp"
    FSDP = "fsdp"
    TP = "tp"
    FSDP_TP = "fsdp+tp"
    PP = "pp"
    DEEPSPEED = "deepspeed"
    HOROVOD = "horovod"
    MIRRORED = "mirrored"
    MULTIWORKER = "multiworker"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Availability:
    """Whether a method can run here; when not, why and the command that fixes it."""

    ok: bool
    reason: str = ""
    fix: str = ""

    @classmethod
    def yes(cls, reason: str = "") -> Availability:
        return cls(True, reason)


@dataclass(frozen=True)
class RanAs:
    """What a job really ran, when its workers noted something other than the method spec says (a DeepSpeed script
    that passed its own config): the job's last line names it, after the note about what was not applied."""

    spec: str  # in place of the method spec on the job's last line
    note: str | None = None  # one line said first, e.g. "…; deepspeed:zero1 was not applied"
    aside: str | None = None  # said at the end of the last line, e.g. "no DistributedDataParallel was built, …"


_Options = TypeVar("_Options", bound="StrategyOptions")  # from_strings on a method's options class returns that class


@dataclass(frozen=True, kw_only=True)
class StrategyOptions:
    """Base for a method's options: a frozen dataclass that validates itself in ``__post_init__``.

    ``shorthands`` maps a bare spec token (``zero2``) to the fields it sets, so ``deepspeed:zero2`` and
    ``deepspeed:zero_stage=2`` mean the same thing. ``spelled`` names the fields the canonical spelling always
    writes, as their shorthand where one exists (:func:`format_spec`: ``deepspeed:zero2``, never a bare
    ``deepspeed`` that hides which stage ran).
    """

    shorthands: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    spelled: ClassVar[tuple[str, ...]] = ()
    moved: ClassVar[Mapping[str, str]] = {}  # former option -> what says it now (a training option, say)
    # Options that name a file. They are made absolute where the spec is parsed, in the user's current directory:
    # a compare cell or a worker may run elsewhere, and must read the file the user meant.
    paths: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_strings(cls: type[_Options], method: str, values: Mapping[str, str]) -> _Options:
        """Build options from ``name -> text`` pairs, converting each text to the field's declared type."""
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, text in values.items():
            _check_moved(method, cls, key)
            if key not in hints or key in ("shorthands", "spelled", "moved", "paths"):
                allowed = ", ".join(cls.field_names()) or "none"
                raise UnknownStrategyError(
                    f'{method} has no option "{key}" (options: {allowed}).{did_you_mean(key, cls.field_names())}',
                    hint=f"see `paratrain strategies` for the options of {method}",
                )
            kwargs[key] = _convert(method, key, text, hints[key])
            if key in cls.paths and kwargs[key] is not None:
                kwargs[key] = str(Path(kwargs[key]).expanduser().resolve())
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"bad options for {method}: {exc}") from None

    def to_strings(self) -> dict[str, str]:
        """The inverse of :meth:`from_strings`, used to pass options to workers through the environment."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


@dataclass(frozen=True, kw_only=True)
class NoOptions(StrategyOptions):
    """For methods that take no options."""


def _check_moved(method: str, options_type: type[StrategyOptions], key: str) -> None:
    if key in options_type.moved:
        raise ConfigError(f'{method} option "{key}" is now a training option for every method: '
                          f"{options_type.moved[key]}", hint="see the Options table in docs/training-options.md")


def _convert(method: str, key: str, text: str, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if origin is typing.Literal:
        choices = [str(a) for a in typing.get_args(hint)]
        if text not in choices:
            raise ConfigError(
                f'{method} option {key}="{text}" is not one of {", ".join(choices)}.{did_you_mean(text, choices)}'
            )
        return text
    if origin is not None and len(args) == 1:  # Optional[X] / X | None
        return _convert(method, key, text, args[0])
    if hint is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f'{method} option {key}="{text}" is not a boolean (use true or false)')
    if hint is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f'{method} option {key}="{text}" is not an integer') from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f'{method} option {key}="{text}" is not a number') from None
    return text


class MethodSpec(ABC):
    """A training method as the launcher sees it, whatever framework trains under it: its name, its options, whether
    it can run here, what it checks and adds before any process starts, and what the job really ran. The runtime
    that trains is beside it: :class:`Strategy` for a PyTorch ``Session``, :class:`paratrain.strategies._tensorflow.
    KerasMethod` for a Keras script through :mod:`paratrain.tf`."""

    method: ClassVar[Method | str]
    options_type: ClassVar[type[StrategyOptions]] = NoOptions
    # The object the method is made of, as the workers note it (launcher/built.py: "ddp", "fsdp", "deepspeed"): a
    # job in which no rank built one did not run this method (see ran_as). None: nothing to check.
    builds: ClassVar[str | None] = None

    @classmethod
    @abstractmethod
    def available(cls) -> Availability:
        """Cheap check: can this method run on this machine at all?"""

    @classmethod
    def check_launch(cls, options: StrategyOptions, train: Any, script: Path | None = None) -> dict[str, Any] | None:
        """Checks the launcher runs before any process starts; returns what the method derived from its options
        for ``script`` (shown by ``paratrain run --dry-run``), or None."""
        return None

    @classmethod
    def ran_as(cls, requested: str, notes: Path) -> RanAs | None:
        """After a successful job: what it really ran, read from the workers' notes, when that is not what
        ``requested`` (the ``--strategy`` text as the user wrote it) says; None when it is.

        By default: a method made of one kind of object (``builds``: a DistributedDataParallel, an FSDP module, a
        DeepSpeed engine) whose object no rank built — a plain script that only all-reduces, or splits its model
        by hand — ran what the script did (torch.distributed, or another wrapper it built itself), and only the
        launch was the method's (:mod:`paratrain.launcher.built`)."""
        if cls.builds is None:
            return None
        from paratrain.launcher import built

        instead = built.launch_only(cls.builds, requested, notes)
        return None if instead is None else RanAs(instead[0], aside=instead[1])

    @classmethod
    def doctor_component(cls, timeout: float) -> Any:
        """`paratrain doctor`'s line for the package behind this method (a :class:`paratrain.probes.Component`:
        its version, what it was built with, the command that fixes it), or None when the method needs nothing
        beyond torch. Methods sharing a package return the same line; doctor shows it once."""
        return None

    @classmethod
    def script_env(cls, options: StrategyOptions, script: Any) -> dict[str, str]:
        """What this method's workers need in their environment to run ``script`` (a Path), beyond the Session's
        variables — e.g. how a script written for the method's own launcher expects to be started."""
        return {}


class Strategy(MethodSpec):
    """A PyTorch method's runtime. The Session calls these, in this order, and nothing else.

    ``setup`` joins the process group and picks the device; ``wrap`` returns the model and optimizer to train with
    (possibly new objects, e.g. sharded parameters); ``backward``/``step`` run one micro-batch / one optimizer step;
    ``state_dict``/``load_state_dict`` give a method-neutral view for checkpoints; ``teardown`` releases everything.
    """

    # Training-option abilities (see paratrain.options): the precisions this method can train in, those its engine
    # applies itself (autocast and any loss scaler; the Session applies the others with its autocast, and hands back
    # fp32 outputs for all), and whether torch.compile works on it.
    supported_precision: ClassVar[frozenset[str]] = frozenset({"fp32", "bf16-mixed", "fp16-mixed", "bf16-true"})
    native_precision: ClassVar[frozenset[str]] = frozenset({"fp32"})
    compilable: ClassVar[bool] = True
    # A method whose engine owns the gradients (DeepSpeed ZeRO keeps them in its own flat buffers) clips them itself,
    # from the grad_clip training option; the Session's clip_grad_norm_ would see no gradients there.
    clips_gradients: ClassVar[bool] = False
    # Does the torch profiler see this method's collectives (gloo:/nccl: events)? Horovod runs its own on a
    # background thread of its C++ core: compare's breakdown then says "not measured" rather than 0 MB and 0 %.
    profiler_sees_collectives: ClassVar[bool] = True

    def __init__(self, options: StrategyOptions, env: DistEnv) -> None:
        self.options = options
        self.env = env
        self.device: torch.device | None = None
        self.precision = "fp32"  # the Session's precision, set before wrap()
        self.train: Any = None  # the Session's TrainOptions, set before wrap()
        self._deferred = False  # Session.init_module() built the model through init_context()

    @property
    def spec(self) -> str:
        return format_spec(self.method, self.options)

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def rank(self) -> int:
        return self.env.rank

    # -- data parallelism: which ranks read different batches ---------------------------------------------------
    # Every method here is data-parallel: each rank is one replica (whole or sharded) and reads its own share of
    # the batch, so these are the rank, the world size and every rank. A method that splits one model over several
    # ranks (tensor or pipeline parallel) overrides them: the ranks holding parts of one replica read the same batch,
    # and the Session's loader, all_reduce, gather and evaluation split go over the replicas alone.
    @property
    def data_parallel_rank(self) -> int:
        return self.rank

    @property
    def data_parallel_size(self) -> int:
        return self.world_size

    @property
    def data_parallel_group(self) -> Any:
        """The process group of this rank's data-parallel peers (one rank from each replica); None: every rank."""
        return None

    @abstractmethod
    def setup(self) -> None:
        """Join the process group (if any) and set ``self.device``."""

    def init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Where ``Session.init_module()`` builds the model. A replicating method holds the whole model on every rank
        anyway, so it builds it as usual; a sharding method overrides this so that no rank but one ever holds it
        whole (fsdp and deepspeed zero3 return :meth:`deferred_shapes`)."""
        return contextlib.nullcontext()

    def deferred_shapes(self) -> contextlib.AbstractContextManager[Any]:
        """The ``init_context`` of a sharding method: rank 0 builds the model for real (the values one process
        builds, given the same seed), the other ranks build shapes only, on the meta device; the method's ``wrap``
        then gives each rank memory for its own shard alone and fills it from rank 0."""
        import warnings

        import torch

        self._deferred = True
        if self.rank == 0:
            return contextlib.nullcontext()
        # A state dict loaded into the shapes before prepare() is a no-op there, as torch warns; it is not lost:
        # rank 0 loaded it too, and wrap() hands its values out.
        warnings.filterwarnings("ignore", message=r".*copying from a non-meta parameter in the checkpoint to a meta")
        return torch.device("meta")

    @abstractmethod
    def wrap(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None
    ) -> tuple[torch.nn.Module, torch.optim.Optimizer | None]:
        """Move the model to the device and apply the method's wrapper."""

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def sync_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Make the gradients the synchronised ones now (before the Session clips them). A no-op where backward
        already did it (DDP, FSDP); Horovod finishes its asynchronous allreduce here."""

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        """Reduce ``tensor`` over the data-parallel replicas ("sum", "max" or "min") through the method's own
        communication."""
        import torch.distributed as dist

        dist.all_reduce(tensor, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
                                    "min": dist.ReduceOp.MIN}[op], group=self.data_parallel_group)
        return tensor

    def barrier(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()

    def grad_norm(self, model: torch.nn.Module) -> float | None:
        """The global gradient norm the method computed while clipping (``clips_gradients`` methods only)."""
        return None

    def state_bytes(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, int]:
        """Bytes of model state this rank holds: parameters, gradients, optimizer state (compare's memory column).
        A method that keeps state outside ``model.parameters()`` (fp32 master copies, flat buffers) counts it."""
        from paratrain.metrics import state_bytes

        return state_bytes(model, optimizer)

    @property
    def frees_parameters_after_forward(self) -> bool:
        """Its parameters are gathered per unit and freed after the unit's forward (see precision.apply's cache)."""
        return False

    def unseen_cpu_bytes(self, model: torch.nn.Module) -> int:
        """Bytes of CPU tensors the method holds where Python cannot reach them (C++ state), which the CPU tensors'
        peak (paratrain.tensor_peak) adds to what it finds. None for most methods."""
        return 0

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The user's module inside any wrapper (``.module`` for DataParallel / DDP)."""
        return model

    def state_dict(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
        """Model and optimizer state keyed by parameter name, sharded where the method shards."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        optims = (optimizer,) if optimizer is not None else ()
        model_sd, optim_sd = get_state_dict(self.unwrap(model), optims)
        return {"model": model_sd, "optim": optim_sd if optimizer is not None else {}}

    def load_state_dict(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        optims = (optimizer,) if optimizer is not None else ()
        set_state_dict(
            self.unwrap(model), optims, model_state_dict=state["model"], optim_state_dict=state.get("optim", {})
        )

    def clear_optimizer_state(self, optimizer: torch.optim.Optimizer) -> None:
        """Forget the optimizer's step state (a checkpoint taken before the first step has none to keep)."""
        optimizer.state.clear()

    def full_model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """Every parameter and buffer, unsharded, on every rank (a collective under sharding methods)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(self.unwrap(model), options=StateDictOptions(full_state_dict=True))
        return cast("dict[str, torch.Tensor]", state)  # full_state_dict: plain tensors, never DTensor shards

    def model_keys(self, local: list[str]) -> set[str]:
        """The model's state dict keys over every rank, from this rank's: the same under every method but one that
        cuts the model into parts that different ranks hold (pp), where it is a collective."""
        return set(local)

    def teardown(self) -> None:
        """Leave the process group. Must be safe to call twice."""


class BackwardSyncControl:
    """Mixin for methods that can skip gradient synchronisation during accumulation micro-batches."""

    def set_grad_sync(self, model: torch.nn.Module, enabled: bool) -> None:
        raise NotImplementedError


class ScheduledStep:
    """Mixin for methods whose model the script cannot call to train (pipeline parallel: no rank holds the whole
    model): the method runs forward, loss and backward of a micro-batch itself, through ``Session.train_step``."""

    def forward_backward(self, model: torch.nn.Module, inputs: tuple, targets: torch.Tensor, loss_fn: Any,
                         weight: float) -> tuple[torch.Tensor, dict[str, float]]:
        """The micro-batch's loss (on every rank) and the seconds of each phase (forward, backward, bubble)."""
        raise NotImplementedError


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split ``fsdp:shard=full,offload=cpu`` / ``deepspeed:zero2`` into a name and raw option tokens.

    Bare tokens (no ``=``) are kept with the value ``""`` so the options class can expand its shorthands.
    """
    name, _, rest = spec.strip().partition(":")
    tokens: dict[str, str] = {}
    for raw in filter(None, (t.strip() for t in rest.split(","))):
        key, eq, value = raw.partition("=")
        tokens[key.strip()] = value.strip() if eq else ""
    return name.strip().lower(), tokens


def expand_shorthands(method: str, options_type: type[StrategyOptions], tokens: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in tokens.items():
        _check_moved(method, options_type, key)
        if value == "" and key in options_type.shorthands:
            out.update({k: str(v).lower() if isinstance(v, bool) else str(v)
                        for k, v in options_type.shorthands[key].items()})
        elif value == "":
            known = list(options_type.shorthands) + options_type.field_names()
            raise UnknownStrategyError(
                f'"{key}" is not an option of {method}; write key=value.{did_you_mean(key, known)}',
                hint=f"see `paratrain strategies` for what {method} accepts",
            )
        else:
            out[key] = value
    return out


def format_spec(method: Method | str, options: StrategyOptions) -> str:
    """The one canonical spelling of a method and its options, used everywhere a spec is shown or compared (run's
    last line, compare's cells, advise's rows, the history): the ``spelled`` fields first, as their shorthand where
    one exists, then every option that differs from its default, as ``name=value``."""
    values = options.to_strings()
    defaults = type(options)().to_strings()
    parts = []
    for key in options.spelled:
        short = [token for token, sets in options.shorthands.items()
                 if {k: str(v) for k, v in sets.items()} == {key: values.get(key)}]
        parts.append(short[0] if short else f"{key}={values.get(key)}")
    parts += [f"{k}={v}" for k, v in values.items() if k not in options.spelled and defaults.get(k) != v]
    return f"{method}:{','.join(parts)}" if parts else str(method)
