"""Horovod (Gloo controller on CPU, NCCL operations on GPUs) behind the Session.

``paratrain run --strategy horovod`` starts the workers through Horovod's own runner (``horovodrun --gloo``); each
worker calls ``hvd.init()``, pins its device by local rank, wraps the optimizer in ``hvd.DistributedOptimizer`` (the
Session's ``grad_accum`` is its ``backward_passes_per_step``) and broadcasts parameters and optimizer state from
rank 0. Gradients, ``session.all_reduce`` and ``session.barrier`` go through Horovod.

paratrain's own bookkeeping — checkpoints through ``torch.distributed.checkpoint``, evaluation's gather — needs a
torch process group, which horovodrun does not start. Rank 0 opens a TCPStore on a free port and tells the others
where it is through ``hvd.broadcast_object``, so the group needs no port from the user and no second launcher.
"""

from __future__ import annotations

import datetime
import importlib.util
import socket
import types
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from paratrain.errors import ConfigError, LaunchError
from paratrain.probes import Component, dist_version, probe
from paratrain.strategies import _procgroup
from paratrain.strategies.base import Availability, Method, Strategy, StrategyOptions

SETUP_FIX = "paratrain setup horovod"


@dataclass(frozen=True, kw_only=True)
class HorovodOptions(StrategyOptions):
    compression: Literal["none", "fp16"] = "none"  # gradients cast to fp16 for the allreduce
    op: Literal["average", "adasum"] = "average"  # Adasum: needs an MPI (CPU) or NCCL (GPU) build

    shorthands: ClassVar = {"fp16": {"compression": "fp16"}, "adasum": {"op": "adasum"}}


# What `horovodrun --check-build` lists (frameworks, controllers, tensor operations), plus the torch (and TensorFlow)
# it was built for. Only the torch binding is imported: the TensorFlow one would cost the import of TensorFlow.
_HOROVOD_PROBE = """
import json, importlib.resources as r, horovod.torch as hvd
meta = json.loads(r.files("horovod").joinpath("metadata.json").read_text())
built, tf = meta.get("pytorch"), meta.get("tensorflow")
print(json.dumps({"tensorflow": tf if tf and tf != "none" else None,
                  "controllers": [n for n, f in (("MPI", hvd.mpi_built), ("Gloo", hvd.gloo_built)) if f()],
                  "ops": [n for n, f in (("NCCL", hvd.nccl_built), ("DDL", hvd.ddl_built), ("CCL", hvd.ccl_built),
                                         ("MPI", hvd.mpi_built), ("Gloo", hvd.gloo_built)) if f()],
                  "torch": built}))
"""


class HorovodStrategy(Strategy):
    method = Method.HOROVOD
    options_type = HorovodOptions
    options: HorovodOptions
    # Horovod's torch adapter has no bfloat16 (or bool) tensors: bf16-true would fail in the first allreduce.
    # bf16-mixed keeps parameters and gradients fp32. fp16-mixed needs a GradScaler around Horovod's synchronize,
    # which paratrain does not do yet.
    supported_precision = frozenset({"fp32", "bf16-mixed"})
    profiler_sees_collectives = False  # Horovod's allreduces run in its C++ background thread, not torch's ops

    def __init__(self, options, env) -> None:
        super().__init__(options, env)
        self._hvd: Any = None
        self._synced = False

    @classmethod
    def available(cls) -> Availability:
        try:
            found = importlib.util.find_spec("horovod") is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return Availability(False, "Horovod is not installed (it needs a patched build for this torch)",
                                SETUP_FIX)
        from paratrain.install import horovod as install

        built = install.installed_for()
        if not install.torch_matches(built):  # its C++ extension would fail to load (or crash) in every worker
            return Availability(False, f"the installed Horovod was built for torch {built}, not {torch.__version__}",
                                SETUP_FIX + " --force")
        return Availability.yes("Horovod on " + ("GPU (NCCL)" if torch.cuda.is_available() else "CPU (Gloo)"))

    @classmethod
    def doctor_component(cls, timeout: float) -> Component:
        version = dist_version("horovod")
        if not version:  # `pip install horovod` fails on current torch and CMake: paratrain builds a patched wheel
            return Component("Horovod", None, "not installed", SETUP_FIX)
        info = probe(_HOROVOD_PROBE, timeout)
        if "error" in info:  # typically built for another torch: rebuilding for this one fixes it
            return Component("Horovod", version, f"error: {info['error']}", SETUP_FIX + " --force")
        frameworks = f"PyTorch (built for torch {info['torch']})"
        tf_built, tf_here = info.get("tensorflow"), dist_version("tensorflow", "tensorflow-cpu")
        if tf_built:
            frameworks += f", TensorFlow/Keras (built for TensorFlow {tf_built})"
        fix = ""
        if tf_here and (tf_built or "").split("+")[0] != tf_here.split("+")[0]:  # Keras scripts would fail
            frameworks += f"; no Keras binding for the installed TensorFlow {tf_here}"
            fix = SETUP_FIX + " --force"
        return Component("Horovod", version, f"frameworks: {frameworks}; "
                                             f"controllers: {', '.join(info['controllers']) or 'none'}; "
                                             f"tensor ops: {', '.join(info['ops']) or 'none'}", fix)

    @classmethod
    def check_launch(cls, options: StrategyOptions, train: Any, script: Any = None) -> dict[str, Any] | None:
        """A Keras script needs Horovod's TensorFlow binding, which `paratrain setup horovod` builds only when
        TensorFlow is installed: said once here rather than by every worker's ImportError."""
        from paratrain.install import horovod as install
        from paratrain.launcher.config import script_framework

        if script is not None and script_framework(script) == "tensorflow":
            tf = install.tensorflow_version()
            built = (install.built_for() or {}).get("tensorflow")
            if tf is None:
                raise ConfigError(f"{script} is a Keras script and TensorFlow is not installed",
                                  hint="pip install tensorflow-cpu (then `paratrain setup horovod --force`)")
            if built != tf:
                had = f"TensorFlow {built}" if built else "no TensorFlow binding"
                raise ConfigError(f"{script} is a Keras script, but the installed Horovod has {had} (TensorFlow "
                                  f"{tf} is installed)", hint=SETUP_FIX + " --force")
        return None

    def setup(self) -> None:
        if not self.env.launched:
            raise LaunchError("strategy horovod needs Horovod's launcher (HOROVOD_RANK is not set)",
                              hint="run it as `paratrain run --strategy horovod --nproc 2 SCRIPT`")
        try:
            import horovod.torch as hvd
        except ImportError as exc:  # built for another torch, or half-installed
            raise LaunchError(f"horovod.torch cannot be imported: {exc}", hint=SETUP_FIX + " --force") from None
        hvd.init()
        self._hvd = hvd
        if hvd.size() != self.env.world_size:
            raise LaunchError(f"Horovod formed {hvd.size()} ranks, expected {self.env.world_size}")
        self._check_op(hvd)
        self.device = _procgroup.pick_device(self.env)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if self.world_size > 1:
            self._join_torch_group(hvd)

    def _check_op(self, hvd: Any) -> None:
        if self.options.op != "adasum" or self.world_size == 1:
            return
        gpu = torch.cuda.is_available()
        if not (hvd.nccl_built() if gpu else hvd.mpi_built()):
            raise ConfigError(f"Adasum on {'GPUs needs a Horovod built with NCCL' if gpu else 'CPU needs MPI'}; "
                              "this Horovod has Gloo operations only", hint="use --strategy horovod (op=average)")
        if self.world_size & (self.world_size - 1):
            raise ConfigError(f"Adasum needs a power-of-two number of ranks, not {self.world_size}",
                              hint="use --nproc 2, 4 or 8")

    def _join_torch_group(self, hvd: Any) -> None:
        """A gloo group beside Horovod's, for checkpoints and evaluation (see the module docstring)."""
        import torch.distributed as dist

        if dist.is_initialized():
            return
        timeout = datetime.timedelta(seconds=self.env.timeout_s or 1800)
        store = None
        where = None
        if self.rank == 0:
            host = "127.0.0.1" if hvd.local_size() == hvd.size() else socket.gethostbyname(socket.gethostname())
            store = dist.TCPStore(host, 0, self.world_size, is_master=True, timeout=timeout,
                                  wait_for_workers=False)
            where = (host, store.port)
        host, port = hvd.broadcast_object(where, root_rank=0, name="paratrain.store")
        if store is None:
            store = dist.TCPStore(host, port, self.world_size, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=self.rank, world_size=self.world_size, timeout=timeout)

    def wrap(self, model, optimizer):
        hvd = self._hvd
        model = model.to(self.device)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        if optimizer is None:
            return model, None
        compression = hvd.Compression.fp16 if self.options.compression == "fp16" else hvd.Compression.none
        op = hvd.Adasum if self.options.op == "adasum" else hvd.Average
        grad_accum = self.train.grad_accum if self.train is not None else 1
        had_state = bool(optimizer.state)
        user_optimizer = optimizer
        optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=compression, backward_passes_per_step=grad_accum, op=op)
        _accept_set_to_none(optimizer)
        _count_steps_for_schedulers(optimizer, user_optimizer)
        if had_state:
            # Only a optimizer that has state needs rank 0's: for an empty one Horovod first takes a real step with
            # zero gradients to create it — AdamW would count a step and decay the weights once, on every rank.
            hvd.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def sync_gradients(self, optimizer) -> None:
        """Finish the allreduce before the Session clips: the norm must be that of the averaged gradients."""
        if self.world_size > 1 and self.options.op != "adasum":
            optimizer.synchronize()
            self._synced = True

    def step(self, optimizer) -> None:
        if self._synced:
            self._synced = False
            with optimizer.skip_synchronize():
                optimizer.step()
        else:
            optimizer.step()  # synchronizes first

    def all_reduce(self, tensor: torch.Tensor, op: str) -> torch.Tensor:
        hvd = self._hvd
        ops = {"sum": hvd.Sum, "max": hvd.Max, "min": hvd.Min}
        return hvd.allreduce(tensor, op=ops[op], name=f"paratrain.all_reduce.{op}")

    def barrier(self) -> None:
        self._hvd.barrier()

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)
        if self._hvd is not None:
            hvd, self._hvd = self._hvd, None
            hvd.shutdown()


def _accept_set_to_none(optimizer: Any) -> None:
    """Horovod 0.28's ``zero_grad()`` predates torch's ``set_to_none`` argument, which the Session, torch's own
    checkpoint helpers and many user scripts pass. Keep Horovod's check (no allreduce may still be pending), then
    zero as torch would."""
    horovods = optimizer.zero_grad
    torchs = super(type(optimizer), optimizer).zero_grad

    def zero_grad(set_to_none: bool = True) -> None:
        if optimizer._handles:
            horovods()  # raises Horovod's own error about the race
        torchs(set_to_none=set_to_none)

    optimizer.zero_grad = zero_grad


def _count_steps_for_schedulers(wrapped: Any, user: torch.optim.Optimizer) -> None:
    """``hvd.DistributedOptimizer`` is a new optimizer object over the user's parameter groups, so an LR scheduler
    built on the user's optimizer (before ``prepare``) still sets the learning rates — but torch's scheduler learns
    that the optimizer stepped only through the ``step`` it patched on *that* object (it sets ``_opt_called``),
    which Horovod's step never calls. Every rank then warned "lr_scheduler.step() before optimizer.step()" at the
    first step of a correct schedule. The wrapped optimizer's step tells the user's optimizer it stepped, as a
    scheduler's own patch would; it stays a bound method, so a scheduler built later on the wrapped optimizer can
    patch it in turn."""
    if wrapped is user:
        return

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        user._opt_called = True  # type: ignore[attr-defined]  # what torch's LRScheduler reads
        return type(self).step(self, *args, **kwargs)

    wrapped.step = types.MethodType(step, wrapped)
