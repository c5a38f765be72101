"""Name -> method. Adding a method is one file in this package and one line in ``_ENTRIES``.

Classes are imported lazily so that ``paratrain strategies`` or a plain ``Session()`` never imports DeepSpeed,
Horovod or TensorFlow.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from paratrain.distenv import PLUGINS_VAR
from paratrain.errors import ConfigError, StrategyUnavailableError, UnknownStrategyError, did_you_mean
from paratrain.strategies.base import (
    Availability,
    Method,
    MethodSpec,
    StrategyOptions,
    expand_shorthands,
    parse_spec,
)
from paratrain.strategies.costs import CostModel, Sharding


@dataclass(frozen=True)
class MethodInfo:
    method: Method | str  # the built-in methods' names are Method values; a registered one may be any name
    framework: str
    launchers: tuple[str, ...]  # the launchers (paratrain.launcher.job.BACKENDS) that can start it; first: default
    summary: str  # one line: when to use it
    target: str | None  # "module:Class"; None while the method is not implemented yet
    multi_process: bool  # True when --nproc > 1 starts several processes
    compare_specs: tuple[str, ...] = ()  # the cells `paratrain compare` runs by default (none: the bare method)
    also_runs: tuple[str, ...] = ()  # other frameworks whose scripts it runs (Horovod: Keras scripts too)
    costs: tuple[CostModel, ...] = ()  # how its configurations lay state out and communicate (advise ranks them)
    splits_model: bool = False  # it splits the model itself by a plan: only models with one (and blocks) run under it
    # the precisions its Strategy's supported_precision takes, known without importing it (advise marks a method
    # that refuses the asked precision n/a; tests/strategies/test_registry.py holds the two equal); None: unknown
    precisions: tuple[str, ...] | None = None

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

    def load(self) -> type[MethodSpec]:
        if self.target is None:
            raise StrategyUnavailableError(
                f"{self.method} is not implemented in this version of paratrain",
                hint="run `paratrain strategies` to see the methods that are",
            )
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


_ALL = Sharding(params=True, grads=True, optimizer=True, sixteen_bit="gathered")
# DeepSpeed's layouts (see paratrain.advise.memory): ZeRO-1/2 cut one flat buffer, ZeRO-3 each tensor; both keep
# fp32 master copies of their partition, and bf16 weights under bf16-mixed.
_ZERO12 = Sharding(layout="flat", master=True, reduce_bucket=True, sixteen_bit="weights")
_ZERO3 = replace(_ALL, gathered="reused", layout="tensor", master=True, reduce_bucket=True, sixteen_bit="weights")
_ENTRIES = [
    MethodInfo(Method.SINGLE, "torch", ("local",),
               "one process, one device: the baseline every other method is measured against",
               "paratrain.strategies.single:SingleStrategy", False,
               precisions=("fp32", "bf16-mixed", "fp16-mixed", "bf16-true"),
               costs=(CostModel("single", Sharding(), "none", "one device", 12),)),
    MethodInfo(Method.DP, "torch", ("local",),
               "torch.nn.DataParallel: one process drives all local GPUs; simplest, slowest to scale",
               "paratrain.strategies.dp:DataParallelStrategy", False,
               precisions=("fp32", "bf16-mixed", "fp16-mixed", "bf16-true"),
               costs=(CostModel("dp", Sharding(gathers_outputs=True), "dp",
                                "one process copying the model to every GPU each step", 11),)),
    MethodInfo(Method.DDP, "torch", ("torchrun",),
               "DistributedDataParallel: one process per device, all-reduced gradients; the default choice",
               "paratrain.strategies.ddp:DDPStrategy", True,
               precisions=("fp32", "bf16-mixed", "fp16-mixed", "bf16-true"),
               costs=(CostModel("ddp", Sharding(buckets=True), "allreduce",
                                "a full replica per GPU, gradients all-reduced while backward runs", 0),)),
    MethodInfo(Method.FSDP, "torch", ("torchrun",),
               "FSDP2 fully_shard: shards params, grads and optimizer state when the model does not fit per device",
               "paratrain.strategies.fsdp:FSDPStrategy", True,
               precisions=("fp32", "bf16-mixed", "bf16-true"),
               costs=(CostModel("fsdp:shard=grad_op", replace(_ALL, gathered="all"), "shard_grads",
                                "state sharded at rest, parameters gathered once per step (ZeRO-2-like)", 1),
                      CostModel("fsdp:shard=none", Sharding(gathered="all", sixteen_bit="gathered"), "allreduce",
                                "FSDP replicating everything (DDP through FSDP)", 6),
                      CostModel("fsdp", replace(_ALL, gathered="unit"), "shard_all",
                                "everything sharded, one block gathered at a time (ZeRO-3-like)", 7))),
    MethodInfo(Method.TP, "torch", ("torchrun",),
               "tensor parallel: each block's matrices split over the ranks, which compute it together on one batch",
               "paratrain.strategies.tp:TensorParallelStrategy", True, splits_model=True,
               precisions=("fp32", "bf16-mixed"),
               costs=(CostModel("tp", Sharding(tensor_parallel=True), "tp",
                                "each block's matrices split over one machine's GPUs, activations all-reduced", 15,
                                one_node=True),)),
    MethodInfo(Method.FSDP_TP, "torch", ("torchrun",),
               "FSDP across groups of tp ranks that split each block's matrices (a 2-D mesh), for the largest models",
               "paratrain.strategies.fsdp_tp:FSDPTPStrategy", True, splits_model=True,
               precisions=("fp32", "bf16-mixed"),
               costs=(CostModel("fsdp+tp", replace(_ALL, gathered="unit", tensor_parallel=True, tp_size=2), "fsdp_tp",
                                "tensor parallel in pairs of GPUs, FSDP sharding across the pairs", 18),
                      CostModel("fsdp+tp:tp=8", replace(_ALL, gathered="unit", tensor_parallel=True, tp_size=8),
                                "fsdp_tp", "tensor parallel over each node's 8 GPUs, FSDP across nodes", 19))),
    MethodInfo(Method.PP, "torch", ("torchrun",),
               "pipeline parallel: consecutive blocks on each rank, the batch streamed through them in micro-batches",
               "paratrain.strategies.pp:PipelineStrategy", True, ("pp:1f1b", "pp:gpipe"), splits_model=True,
               precisions=("fp32", "bf16-mixed"),
               costs=(CostModel("pp:1f1b", Sharding(pipeline="1f1b"), "pp",
                                "consecutive blocks per GPU, micro-batches streamed through (1F1B)", 16),
                      CostModel("pp:gpipe", Sharding(pipeline="gpipe"), "pp",
                                "consecutive blocks per GPU, every micro-batch's activations kept (GPipe)", 17))),
    MethodInfo(Method.DEEPSPEED, "torch", ("torchrun",),
               "DeepSpeed ZeRO stages 0-3 with optional CPU offload, for very large models",
               "paratrain.strategies.deepspeed:DeepSpeedStrategy", True,
               ("deepspeed:zero1", "deepspeed:zero2", "deepspeed:zero3"),
               precisions=("fp32", "bf16-mixed", "fp16-mixed"),
               costs=(CostModel("deepspeed:zero1", replace(_ZERO12, optimizer=True), "shard_grads",
                                "optimizer state sharded", 2),
                      CostModel("deepspeed:zero2", replace(_ZERO12, grads=True, optimizer=True), "shard_grads",
                                "gradients and optimizer state sharded", 3),
                      CostModel("deepspeed:zero0", Sharding(), "allreduce", "DeepSpeed's engine with nothing sharded",
                                5),
                      CostModel("deepspeed:zero3", _ZERO3,
                                "shard_all", "everything sharded (ZeRO-3)", 8),
                      CostModel("deepspeed:zero2,offload=optimizer",
                                replace(_ZERO12, grads=True, optimizer=True, offload=("optimizer",)),
                                "shard_grads", "ZeRO-2 with the optimizer state and its step in host memory", 9),
                      CostModel("deepspeed:zero3,offload=all",
                                replace(_ZERO3, offload=("params", "grads", "optimizer")),
                                "shard_all", "ZeRO-3 with all state in host memory", 10))),
    MethodInfo(Method.HOROVOD, "torch", ("horovodrun",),
               "Horovod ring all-reduce through horovodrun; for clusters and scripts already built on Horovod",
               "paratrain.strategies.horovod:HorovodStrategy", True, also_runs=("tensorflow",),
               precisions=("fp32", "bf16-mixed"),
               costs=(CostModel("horovod", Sharding(fusion_buffer=True), "allreduce",
                                "a full replica per GPU, Horovod's ring all-reduce", 4),)),
    MethodInfo(Method.MIRRORED, "tensorflow", ("tfconfig",),
               "tf.distribute.MirroredStrategy: Keras on all GPUs of one machine (or N logical CPU devices)",
               "paratrain.strategies.mirrored:MirroredStrategy", False,
               costs=(CostModel("mirrored", Sharding(), "allreduce", "Keras replicas on the GPUs of one process",
                                14),)),
    MethodInfo(Method.MULTIWORKER, "tensorflow", ("tfconfig",),
               "tf.distribute.MultiWorkerMirroredStrategy: Keras across processes or machines (TF_CONFIG)",
               "paratrain.strategies.multiworker:MultiWorkerStrategy", True,
               costs=(CostModel("multiworker", Sharding(), "allreduce",
                                "Keras replicas across processes, gradients all-reduced", 13),)),
]
# name -> entry. Open: a plug-in adds a method with register(), and every command sees it (entries()).
REGISTRY: dict[str, MethodInfo] = {str(e.method): e for e in _ENTRIES}
_plugins_loaded = False


def register(entry: MethodInfo) -> None:
    REGISTRY[str(entry.method)] = entry


def unregister(name: str) -> None:
    REGISTRY.pop(name, None)


def _load_plugins() -> None:
    """Import the modules named in ``PARATRAIN_PLUGINS`` (comma-separated) once; each registers its methods. The
    variable reaches every worker a launcher starts, so a plug-in's method runs there as it does here."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_VAR, "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"{PLUGINS_VAR} names {module}, which cannot be imported: {exc}",
                              hint=f"put the module on PYTHONPATH, or unset {PLUGINS_VAR}") from None


def entries() -> list[MethodInfo]:
    """Every method: the built-in ones, then those plug-ins registered."""
    _load_plugins()
    return list(REGISTRY.values())


def names() -> list[str]:
    return [str(e.method) for e in entries()]


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
    _load_plugins()
    try:
        return REGISTRY[str(name)]
    except KeyError:
        raise UnknownStrategyError(
            f'unknown strategy "{name}" (known: {", ".join(names())}).{did_you_mean(str(name), names())}',
            hint="run `paratrain strategies` for the list",
        ) from None


def availability(name: str | Method) -> Availability:
    entry = info(name)
    if not entry.implemented:
        return Availability(False, "not implemented yet", "")
    return entry.load().available()


def resolve(spec: str, extra_options: Mapping[str, str] | None = None) -> tuple[type[MethodSpec], StrategyOptions]:
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


def require_available(cls: type[MethodSpec]) -> None:
    avail = cls.available()
    if not avail.ok:
        raise StrategyUnavailableError(
            f"strategy {cls.method} is not available here: {avail.reason}", hint=avail.fix or None
        )
