"""``Session``: one training API for every PyTorch method.

The Session resolves the method (from the launcher's environment, or its argument), then delegates every step to
that Strategy. It holds the loop bookkeeping that is the same for all methods: global-batch sharding, loss
weighting for uneven chunks and gradient accumulation, the optimizer-step counter and checkpoints.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch

from paratrain import batchnorm, blocks, checkpoint, evaluation, fastpath, metrics, session_start
from paratrain import options as train_options
from paratrain import precision as amp
from paratrain.console import notice, user_print
from paratrain.data import MicroBatch, ShardedLoader
from paratrain.distenv import DistEnv
from paratrain.errors import ConfigError, LaunchError
from paratrain.progress import Progress
from paratrain.run_hooks import RunHooks
from paratrain.strategies import _procgroup, registry
from paratrain.strategies.base import BackwardSyncControl, ScheduledStep, Strategy

ReduceOp = Literal["mean", "sum", "max", "min"]


class Session:
    """Train one model under the method chosen by ``paratrain run`` (or ``Session("ddp")``).

    The training options — the keyword arguments besides the checkpoint ones, listed below from
    :class:`paratrain.options.TrainOptions` — mean the same under every method, and may come from here or from
    ``paratrain run`` flags / ``paratrain.toml`` (a value set both ways differently is an error). ``checkpoint_dir`` +
    ``checkpoint_every`` save every N optimizer steps and resume from the newest complete checkpoint in ``prepare``
    (keeping the newest ``keep``, default 2) — also set by ``paratrain run --checkpoint-dir/--checkpoint-every``.
    """

    @train_options.as_keywords
    def __init__(
        self,
        strategy: str | None = None,
        *,
        checkpoint_dir: str | None = None,
        checkpoint_every: int | None = None,
        keep: int | None = None,
        **options: Any,
    ) -> None:
        session_start.install_failure_hook()
        metrics.start_peak_rss()  # this rank's peak memory is counted from here (metrics.peak_memory)
        self.options = train_options.resolve(options, train_options.from_env())
        self._hooks = RunHooks.from_environ()  # what compare asks of a measured run (paratrain.run_hooks)
        if self._hooks.accum_split > 1:
            self.options = dataclasses.replace(self.options,
                                               grad_accum=self.options.grad_accum * self._hooks.accum_split)
        self.env = DistEnv.from_environ()
        spec = session_start.choose_spec(strategy, self.env)
        cls, method_options = registry.resolve(spec, self.env.options)
        registry.require_available(cls)
        if not issubclass(cls, Strategy):  # a TensorFlow method: trained by Keras through paratrain.tf
            raise ConfigError(f"{cls.method} is a TensorFlow method: a PyTorch Session cannot train under it",
                              hint="in a Keras script use `from paratrain import tf as ptf; strategy = ptf.strategy()`")
        if registry.info(cls.method).multi_process and not self.env.launched:
            script = sys.argv[0] if sys.argv and sys.argv[0] else "train.py"
            raise LaunchError(
                f"strategy {cls.method} needs one process per rank, but this script was started directly",
                hint=f"run `paratrain run --strategy {spec} --nproc 2 {script}`",
            )
        self._strategy: Strategy = cls(method_options, self.env)
        self._auto = session_start.auto_checkpoint(self.env, checkpoint_dir, checkpoint_every, keep)
        self.grad_accum = self.options.grad_accum
        self.per_rank_batch = self.options.per_rank_batch
        self.seed = self.options.seed if self.options.seed is not None else 0
        self.grad_norm: float | None = None  # the global gradient norm before the last clipping (grad_clip only)
        self._scaler: torch.amp.GradScaler | None = None
        self._max_steps = self._hooks.max_steps
        self.step_count = 0
        self._micro_done = 0
        self._loss_weight = 1.0 / self.grad_accum
        self._micro_samples = 0  # samples in the current micro-batch (0 for padding), for throughput
        self._model: torch.nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._scheduler: Any = None
        self._scheduler_at: int | None = None  # the scheduler's last_epoch after session.step() last stepped it
        self._scheduler_warned = False
        self._loader: ShardedLoader | None = None
        self._closed = False
        self._used = {"model": True, "loader": True}  # did the script train with what prepare() returned?
        self._checked_use = False
        self._use_hook: Any = None  # the forward hook that notices the prepared model in use; gone after step 1
        self._check_options()
        self._strategy.setup()
        amp.check_supported(self.options.precision, self.device)
        if self.options.seed is not None:
            session_start.seed_everything(self.options.seed)
        self._metrics = metrics.StepRecorder.from_env(self.rank, self.data_parallel_rank)
        self._metrics.comm_visible = self._strategy.profiler_sees_collectives
        self._progress = Progress.from_env(self.rank)
        atexit.register(self.close)

    # -- identity -------------------------------------------------------------------------------------------
    @property
    def strategy(self) -> str:
        return self._strategy.spec

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def local_rank(self) -> int:
        return self.env.local_rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def data_parallel_rank(self) -> int:
        """This rank's place among the model's replicas, which read different batches: the rank itself under every
        data-parallel method; under a method that splits one model over several ranks, those ranks share it."""
        return self._strategy.data_parallel_rank

    @property
    def data_parallel_size(self) -> int:
        """How many replicas read different batches: the world size under every data-parallel method."""
        return self._strategy.data_parallel_size

    @property
    def device(self) -> torch.device:
        assert self._strategy.device is not None  # set by setup()
        return self._strategy.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- training -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def init_module(self) -> Iterator[None]:
        """Build the model inside this block (``with session.init_module(): model = build()``) so that a sharding
        method never holds it whole on every rank: under fsdp and deepspeed zero3 only rank 0 builds it (the other
        ranks build shapes on the meta device and receive their shard of rank 0's values in :meth:`prepare`, one
        block or module at a time). Under every other method each rank holds the whole
        model anyway, and the block changes nothing. The initial weights are those of building the model without
        it (rank 0's, from the same seed), so every method still trains the single-process curve; a state dict
        loaded into the model before ``prepare`` reaches every rank the same way."""
        if self._model is not None:
            raise ConfigError("init_module() builds the model that prepare() wraps; prepare() was already called",
                              hint="build the model inside `with session.init_module():`, then call prepare()")
        self._strategy.precision = self.options.precision
        self._strategy.train = self.options
        with self._strategy.init_context():
            yield

    def prepare(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                loader: torch.utils.data.DataLoader | None = None, scheduler: Any = None) -> tuple:
        """Wrap the model (and optimizer) for the method and shard the loader; returns them in the same order —
        ``model, optimizer, loader`` or, with a scheduler, ``model, optimizer, loader, scheduler``.

        A scheduler given here is stepped by :meth:`step`, once per optimizer step, and saved in checkpoints."""
        if self._model is not None:
            raise ConfigError("prepare() was already called on this Session", hint="call it once per Session")
        if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise ConfigError(
                "ReduceLROnPlateau steps on a metric (scheduler.step(val_loss)), which session.step() cannot give it",
                hint="leave it out of prepare() and call scheduler.step(metric) yourself after evaluating",
            )
        opts = self.options
        multi = registry.info(self._strategy.method).multi_process  # one process per device
        model = batchnorm.convert(model, multi_process=multi, world_size=self.data_parallel_size,
                                  device_type=self.device.type, enabled=opts.sync_batchnorm, is_main=self.is_main,
                                  training=optimizer is not None, group=self._strategy.data_parallel_group)
        if opts.precision == "bf16-true":
            model = model.to(torch.bfloat16)  # in place: the optimizer's parameters are the same objects
        if opts.activation_checkpointing and optimizer is not None:  # before any wrapper: hooks on the user's blocks
            count = blocks.checkpoint_activations(model, opts.activation_checkpointing)
            notice(blocks.checkpointed_notice(opts.activation_checkpointing, count))
        with self._progress.phase("session.prepare"):
            self._strategy.precision = opts.precision
            self._strategy.train = opts
            wrapped, optimizer = self._strategy.wrap(model, optimizer)
        native = opts.precision in self._strategy.native_precision
        amp.apply(wrapped, opts.precision, self.device, autocast=not native,
                  cache=not (opts.activation_checkpointing or self._strategy.frees_parameters_after_forward))
        if names := fastpath.turn_off_nested_tensor(self._strategy.unwrap(wrapped)):
            notice(fastpath.turned_off_notice(str(self._strategy.method), names))
        if opts.compile_backend is not None:
            wrapped.compile(backend=opts.compile_backend)  # in place: state dict keys stay the user's
        self._scaler = amp.scaler(opts.precision, self.device, native=native)
        if wrapped is not model:  # DDP/DP wrappers: a forward through the user's own module would skip the sync
            self._used["model"] = False
            self._use_hook = wrapped.register_forward_pre_hook(lambda *_: self._used.__setitem__("model", True))
        model = wrapped
        self._model, self._optimizer, self._scheduler = model, optimizer, scheduler
        self._scheduler_at = getattr(scheduler, "last_epoch", None)
        if loader is not None:
            self._loader = ShardedLoader(
                loader, rank=self.data_parallel_rank, world_size=self.data_parallel_size, grad_accum=self.grad_accum,
                per_rank_batch=self.per_rank_batch, device=self.device, seed=self.seed,
                on_micro_batch=self._on_micro_batch,
                on_data=self._metrics.data_ready if self._metrics.enabled else None,
                on_epoch=self._metrics.epoch if self._metrics.enabled else None,
            )
            self._used["loader"] = self.data_parallel_size == 1  # one replica: the user's own loader is the same data
        if self._auto is not None and (latest := self._auto.latest()) is not None:
            self.load(str(latest))  # a restarted job continues where its last complete checkpoint left it
            notice(f"resumed from {latest} (step {self.step_count})")
        if self._hooks.reseed is not None:  # compare's seed floor (paratrain.run_hooks)
            session_start.seed_everything(self._hooks.reseed)
        out: tuple = (model, optimizer, self._loader)
        return (*out, scheduler) if scheduler is not None else out

    def _on_micro_batch(self, micro: MicroBatch) -> None:
        self._used["loader"] = True
        self._loss_weight = micro.weight
        self._micro_samples = len(micro.indices) if micro.weight else 0
        if self.grad_accum > 1 and isinstance(self._strategy, BackwardSyncControl) and self._model is not None:
            # Gradient sync is decided before forward (DDP), so it is set as the batch is handed out.
            self._strategy.set_grad_sync(self._model, micro.last)

    def _check_prepared_objects_used(self) -> None:
        """The first step: a script that prepared its model and loader but trains with the originals would have
        every rank train the whole batch with no gradient sync — silently twice the work and a different result."""
        self._checked_use = True
        if self._use_hook is not None:  # checked once: no cost on every later forward
            self._use_hook.remove()
            self._use_hook = None
        unused = [name for name, used in self._used.items() if not used]
        if unused:
            what = " and ".join(unused)
            raise ConfigError(
                f"the {what} returned by session.prepare() {'were' if len(unused) > 1 else 'was'} not used in the "
                f"first step: every rank would train on its own, without the {self.strategy} sync",
                hint="write `model, optimizer, loader = session.prepare(model, optimizer, loader)` and train with "
                     "those names",
            )

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of this rank's (mean) loss, weighted so the synchronised gradient is the global-batch mean."""
        weight = self._loss_weight
        self._metrics.backward(loss, weight, self._micro_samples)
        loss = loss if weight == 1.0 else loss * weight
        self._metrics.backward_started()
        started = time.perf_counter()
        with self._progress.phase("session.backward"):
            self._strategy.backward(self._scaler.scale(loss) if self._scaler is not None else loss)
        self._metrics.add("backward", time.perf_counter() - started)
        self._micro_done += 1

    def train_step(self, inputs: Any, targets: torch.Tensor,
                   loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """One micro-batch of training in one call, under every method: ``loss_fn(model(inputs), targets)``, its
        backward, then :meth:`step`. Returns the loss, detached. ``inputs`` is a tensor or a tuple of the model's
        positional arguments.

        The form pipeline parallelism (pp) needs: there no rank holds the whole model, so the script cannot call it
        and form the loss; the method runs forward, loss and backward through its stages, and every rank gets the
        loss back."""
        model = self._require_model()
        args = inputs if isinstance(inputs, tuple) else (inputs,)
        if not isinstance(self._strategy, ScheduledStep):
            loss = loss_fn(model(*args), targets)
            self.backward(loss)
            self.step()
            return loss.detach()
        self._used["model"] = True
        weight = self._loss_weight
        with self._progress.phase("session.train_step"):
            loss, phases = self._strategy.forward_backward(model, args, targets, loss_fn, weight)
        self._metrics.backward(loss, weight, self._micro_samples)
        for phase, seconds in phases.items():
            self._metrics.add(phase, seconds)
        self._micro_done += 1
        self.step()
        return loss

    def step(self) -> None:
        """Once every ``grad_accum`` backward calls: the optimizer step, zero_grad, then the step of the scheduler
        given to :meth:`prepare` (if any) — so the script must not call ``scheduler.step()`` itself."""
        if self._micro_done < self.grad_accum:
            return
        self._micro_done = 0
        if self._optimizer is None or self._model is None:  # prepare() sets both or neither
            raise ConfigError("step() needs an optimizer", hint="pass it to session.prepare(model, optimizer)")
        if not self._checked_use:
            self._check_prepared_objects_used()
        started = time.perf_counter()
        with self._progress.phase("session.step"):
            if self.options.grad_clip is not None and not self._strategy.clips_gradients:
                self._strategy.sync_gradients(self._optimizer)
                self._clip(self.options.grad_clip)
            if self._scaler is not None:
                self._scaler.step(self._optimizer)
                self._scaler.update()
            else:
                self._strategy.step(self._optimizer)
        if self.options.grad_clip is not None and self._strategy.clips_gradients:
            self.grad_norm = self._strategy.grad_norm(self._model)
        self._metrics.add("optimizer", time.perf_counter() - started)
        self._metrics.step_end(self.step_count + 1, self._model, self._optimizer,  # before grads are freed
                               self._strategy.state_bytes)
        self._optimizer.zero_grad(set_to_none=True)
        model = self._model
        assert model is not None  # checked at the top of step()
        self._metrics.gradients_freed(self.step_count + 1, lambda: self._strategy.unseen_cpu_bytes(model))
        if self._scheduler is not None:
            self._step_scheduler()
        self.step_count += 1
        self._progress.stepped(self.step_count)
        if self._auto is not None and self._auto.due(self.step_count):
            self.save(str(self._auto.path_for(self.step_count)))
            if self.is_main:
                self._auto.prune()
        if self._max_steps is not None and self.step_count >= self._max_steps:
            notice(f"stopping after {self.step_count} optimizer steps, as `paratrain compare --steps` asked")
            self.close()
            raise SystemExit(0)  # every rank is here at the same step: the run ends cleanly

    def _clip(self, max_norm: float) -> None:
        """Clip the *global* gradient norm: under DDP the gradients are already the all-reduced ones; under FSDP they
        are DTensor shards, whose norm torch reduces over every rank — never one shard's local norm."""
        assert self._optimizer is not None and self._model is not None
        if self._scaler is not None:
            self._scaler.unscale_(self._optimizer)  # clip the true gradients, not the scaled ones
        norm = torch.nn.utils.clip_grad_norm_(self._model.parameters(), max_norm)
        self.grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def _check_options(self) -> None:
        opts, cls = self.options, type(self._strategy)
        if opts.precision not in cls.supported_precision:
            allowed = ", ".join(p for p in train_options.PRECISIONS if p in cls.supported_precision)
            raise ConfigError(f"{cls.method} does not support precision {opts.precision} (supported: {allowed})",
                              hint="use bf16-mixed, or a method that has a gradient scaler (single, dp, ddp)")
        if opts.compile_backend is not None and not cls.compilable:
            raise ConfigError(f"{cls.method} cannot be compiled with torch.compile",
                              hint="drop compile, or use ddp (one process per device), which can")

    def _step_scheduler(self) -> None:
        """A scheduler the script steps as well advances twice per optimizer step — its schedule over in half the
        steps, silently. Said once, on the main rank."""
        now = getattr(self._scheduler, "last_epoch", None)
        at = self._scheduler_at
        if now is not None and at is not None and now != at and not self._scheduler_warned:
            self._scheduler_warned = True
            notice(f"the scheduler was also stepped outside session.step() ({now - at} extra "
                   "step(s) before this optimizer step), so it runs ahead of the optimizer: remove your own "
                   "scheduler.step() — session.step() steps the scheduler given to prepare()")
        self._scheduler.step()
        self._scheduler_at = getattr(self._scheduler, "last_epoch", None)

    # -- collectives and output -----------------------------------------------------------------------------
    def all_reduce(self, value: torch.Tensor | float, op: ReduceOp = "mean") -> torch.Tensor | float:
        """Reduce a tensor or number over the data-parallel replicas (every rank under a data-parallel method);
        returns the same kind it was given (detached)."""
        if op not in ("mean", "sum", "max", "min"):  # checked in one process too: a typo never waits for a launch
            raise ConfigError(f'all_reduce op "{op}" is not one of mean, sum, max, min')
        is_tensor = isinstance(value, torch.Tensor)
        t = value.detach().clone() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
        if self.data_parallel_size > 1:
            orig_device = t.device
            t = t.to(self.device)
            with self._progress.phase("session.all_reduce"):
                t = self._strategy.all_reduce(t, "sum" if op == "mean" else op)
            if op == "mean":
                t = t / self.data_parallel_size
            t = t.to(orig_device)
        return t if is_tensor else t.item()

    def prepare_eval(self, loader: torch.utils.data.DataLoader) -> evaluation.EvalLoader:
        """This rank's share of an evaluation loader: over all ranks every sample exactly once, in dataset order,
        the same number of batches on every rank (a rank with too few samples gets batches of 0 samples, so a
        sharded forward never waits for a rank that stopped), moved to the device. Before or after prepare(),
        once per evaluation set. Sum metrics with ``all_reduce(x, op="sum")``; see :mod:`paratrain.evaluation`."""
        return evaluation.EvalLoader(loader, rank=self.data_parallel_rank, world_size=self.data_parallel_size,
                                     device=self.device)

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor concatenated along dim 0 in rank order, returned on every rank (detached, on the
        tensor's device); dim 0 may differ per rank, the rest must not. Over an eval loader's outputs that is the
        dataset order. Every rank must call it."""
        with self._progress.phase("session.gather"):
            return evaluation.gather(tensor, world_size=self.data_parallel_size, device=self.device,
                                     group=self._strategy.data_parallel_group)

    def log(self, **values: float) -> None:
        """Record named metrics (``session.log(val_acc=0.93)``): `paratrain compare` shows the main rank's last value
        of each beside the loss. A no-op when nothing is measuring, so scripts can keep the call."""
        if self.is_main:
            metrics.log(**values)

    def print(self, *args: object, **kwargs: Any) -> None:
        """print() on the main rank only."""
        if self.is_main:
            user_print(*args, **kwargs)

    def barrier(self) -> None:
        if self.world_size > 1:
            with self._progress.phase("session.barrier"):
                self._strategy.barrier()

    # -- state ----------------------------------------------------------------------------------------------
    def model_state_dict(self) -> dict[str, torch.Tensor]:
        """The full (unsharded) model state on every rank, keyed like the user's own module."""
        model = self._require_model()
        with self._progress.phase("session.model_state_dict"):
            return self._strategy.full_model_state_dict(model)

    def save(self, path: str) -> None:
        """Write a checkpoint directory atomically; every rank must call it."""
        model = self._require_model()
        with self._progress.phase("session.save"):
            checkpoint.save(path, self._strategy, model, self._optimizer, self._trainer_state())

    def load(self, path: str) -> None:
        """Restore a checkpoint written by any method at any world size; every rank must call it."""
        model = self._require_model()
        with self._progress.phase("session.load"):
            state = checkpoint.load(path, self._strategy, model, self._optimizer)
        self.step_count = int(state.get("step_count", 0))
        if self._scheduler is not None and state.get("scheduler") is not None:
            self._scheduler.load_state_dict(state["scheduler"])
            self._scheduler_at = getattr(self._scheduler, "last_epoch", None)
        if self._loader is not None and state.get("loader") is not None:
            self._loader.load_state_dict(state["loader"])
        if self._scaler is not None and state.get("scaler") is not None:
            self._scaler.load_state_dict(state["scaler"])

    def _trainer_state(self) -> dict[str, Any]:
        return {
            "step_count": self.step_count,
            "scheduler": self._scheduler.state_dict() if self._scheduler is not None else None,
            "loader": self._loader.state_dict() if self._loader is not None else None,
            "scaler": self._scaler.state_dict() if self._scaler is not None else None,
        }

    def _require_model(self) -> torch.nn.Module:
        if self._model is None:
            raise ConfigError("call session.prepare(model, optimizer, loader) first")
        return self._model

    # -- lifecycle ------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Leave the process group. Called automatically at exit; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._metrics.close(self._strategy.device)
        self._progress.close(failed=_procgroup.is_failing())
        self._strategy.teardown()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
