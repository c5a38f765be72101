"""Name -> method. Adding a method is one file in this package and one line in ``_ENTRIES``.

Classes are imported lazily so that ``paratrain strategies`` or a plain ``Session()`` never imports DeepSpeed,
Horovod or TensorFlow.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from paratrain.errors import StrategyUnavailableError, UnknownStrategyError, did_you_mean
from paratrain.strategies.base import (
    Availability,
    Method,
    Strategy,
    StrategyOptions,
    expand_shorthands,
    parse_spec,
)


@dataclass(frozen=True)
class MethodInfo:
    method: Method
    framework: str
    launchers: tuple[str, ...]  # the launchers (paratrain.launcher.job.BACKENDS) that can start it; first: default
    summary: str  # one line: when to use it
    target: str | None  # "module:Class"; None while the method is not implemented yet
    multi_process: bool  # True when --nproc > 1 starts several processes
    compare_specs: tuple[str, ...] = ()  # the cells `paratrain compare` runs by default (none: the bare method)
    also_runs: tuple[str, ...] = ()  # other frameworks whose scripts it runs (Horovod: Keras scripts too)

    @property
    def launcher(self) -> str:
        """The launcher `paratrain run` uses for it."""
        return self.launchers[0]

    @property
    def implemented(self) -> bool:
        return self.target is not None

    @property
    def frameworks(self) -> str:
        """What the tables show: "torch", or "torch, tensorflow" for a method that runs both kinds of script."""
        return ", ".join((self.framework, *self.also_runs))

    def runs(self, framework: str) -> bool:
        """Can this method run a script of ``framework`` ("torch" or "tensorflow")?"""
        return framework == self.framework or framework in self.also_runs

    def load(self) -> type[Strategy]:
        if self.target is None:
            raise StrategyUnavailableError(
                f"{self.method} is not implemented in this version of paratrain",
                hint="run `paratrain strategies` to see the methods that are",
            )
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


_ENTRIES = [
    MethodInfo(Method.SINGLE, "torch", ("local",),
               "one process, one device: the baseline every other method is measured against",
               "paratrain.strategies.single:SingleStrategy", False),
    MethodInfo(Method.DP, "torch", ("local",),
               "torch.nn.DataParallel: one process drives all local GPUs; simplest, slowest to scale",
               "paratrain.strategies.dp:DataParallelStrategy", False),
    MethodInfo(Method.DDP, "torch", ("torchrun",),
               "DistributedDataParallel: one process per device, all-reduced gradients; the default choice",
               "paratrain.strategies.ddp:DDPStrategy", True),
    MethodInfo(Method.FSDP, "torch", ("torchrun",),
               "FSDP2 fully_shard: shards params, grads and optimizer state when the model does not fit per device",
               "paratrain.strategies.fsdp:FSDPStrategy", True),
    MethodInfo(Method.DEEPSPEED, "torch", ("torchrun",),
               "DeepSpeed ZeRO stages 0-3 with optional CPU offload, for very large models",
               "paratrain.strategies.deepspeed:DeepSpeedStrategy", True,
               ("deepspeed:zero1", "deepspeed:zero2", "deepspeed:zero3")),
    MethodInfo(Method.HOROVOD, "torch", ("horovodrun",),
               "Horovod ring all-reduce through horovodrun; for clusters and scripts already built on Horovod",
               "paratrain.strategies.horovod:HorovodStrategy", True, also_runs=("tensorflow",)),
    MethodInfo(Method.MIRRORED, "tensorflow", ("tfconfig",),
               "tf.distribute.MirroredStrategy: Keras on all GPUs of one machine (or N logical CPU devices)",
               "paratrain.strategies.mirrored:MirroredStrategy", False),
    MethodInfo(Method.MULTIWORKER, "tensorflow", ("tfconfig",),
               "tf.distribute.MultiWorkerMirroredStrategy: Keras across processes or machines (TF_CONFIG)",
               "paratrain.strategies.multiworker:MultiWorkerStrategy", True),
]
REGISTRY: Mapping[Method, MethodInfo] = {e.method: e for e in _ENTRIES}


def names() -> list[str]:
    return [m.value for m in REGISTRY]


def split_specs(text: str) -> list[str]:
    """``"single,deepspeed:zero2,config=ds.json"`` -> ``["single", "deepspeed:zero2,config=ds.json"]``: a method's
    options are comma-separated too, so a piece that does not start with a method name continues the spec before
    it."""
    specs: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        starts_method = piece.partition(":")[0] in names()
        if specs and not starts_method and ":" in specs[-1]:
            specs[-1] += f",{piece}"
        else:
            specs.append(piece)
    return specs


def info(name: str | Method) -> MethodInfo:
    try:
        return REGISTRY[Method(name)]
    except ValueError:
        raise UnknownStrategyError(
            f'unknown strategy "{name}" (known: {", ".join(names())}).{did_you_mean(str(name), names())}',
            hint="run `paratrain strategies` for the list",
        ) from None


def availability(name: str | Method) -> Availability:
    entry = info(name)
    if not entry.implemented:
        return Availability(False, "not implemented yet", "")
    return entry.load().available()


def resolve(spec: str, extra_options: Mapping[str, str] | None = None) -> tuple[type[Strategy], StrategyOptions]:
    """``"fsdp:shard=full"`` -> (FSDPStrategy, FSDPOptions(shard="full")).

    ``extra_options`` are raw values from the environment (``PARATRAIN_<OPTION>``); ones the method does not know
    are ignored there, since the environment may carry another method's settings.
    """
    name, tokens = parse_spec(spec)
    cls = info(name).load()
    raw = {}
    fields = set(cls.options_type.field_names())
    for key, value in (extra_options or {}).items():
        if key in fields:
            raw[key] = value
    raw.update(expand_shorthands(name, cls.options_type, tokens))
    return cls, cls.options_type.from_strings(name, raw)


def require_available(cls: type[Strategy]) -> None:
    avail = cls.available()
    if not avail.ok:
        raise StrategyUnavailableError(
            f"strategy {cls.method} is not available here: {avail.reason}", hint=avail.fix or None
        )
