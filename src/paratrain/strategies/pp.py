"""Pipeline parallelism on ``torch.distributed.pipelining``: each rank holds consecutive blocks of the model (a
stage), and a batch flows through the stages in micro-batches, so that the stages work at the same time on different
micro-batches. The ranks are one replica (data-parallel size 1): each reads the whole batch; only the first stage
feeds it in and only the last computes the loss.

Why the script trains through ``session.train_step(inputs, targets, loss_fn)``: on a stage, ``model(x)`` is not the
model's output (the first stage returns hidden states, the others have no ``x``), so a loss cannot be formed in the
script. The schedule runs forward, loss and backward of every micro-batch itself — GPipe (all forwards, then all
backwards) or 1F1B (one forward, one backward once the pipe is full, so a stage holds at most as many micro-batches'
activations as there are stages). The gradients equal one process's: each micro-batch's loss is weighted by its
share of the batch, and by the Session's weight under gradient accumulation.

Under ``torch.no_grad()`` the model is callable as usual (evaluation): the stages pass the batch along and every
rank gets the output.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.distributed as dist
from torch import nn

from paratrain import pipeline_split
from paratrain import precision as amp
from paratrain.errors import ConfigError
from paratrain.model_facts import param_count
from paratrain.strategies import _procgroup
from paratrain.strategies._one_replica import OneReplica
from paratrain.strategies.base import Availability, Method, ScheduledStep, Strategy, StrategyOptions

TRAIN_STEP_HINT = ("train with `loss = session.train_step(x, y, loss_fn)`, which runs forward, loss and backward "
                   "through the pipeline (docs/pipeline-parallel.md)")


@dataclass(frozen=True, kw_only=True)
class PipelineOptions(StrategyOptions):
    """``schedule``: 1f1b (the default: a stage keeps at most one micro-batch per stage in flight) or gpipe (every
    forward, then every backward: the simplest, and the most activation memory). ``chunks``: micro-batches per
    batch, twice the stages by default; a batch that does not divide by it uses the largest number that divides."""

    shorthands: ClassVar = {"1f1b": {"schedule": "1f1b"}, "gpipe": {"schedule": "gpipe"}}
    spelled: ClassVar = ("schedule",)
    schedule: Literal["1f1b", "gpipe"] = "1f1b"
    chunks: int | None = None

    def __post_init__(self) -> None:
        if self.chunks is not None and self.chunks < 1:
            raise ValueError(f"chunks={self.chunks}: a batch needs at least one micro-batch")


class PipelineModel(nn.Module):
    """What ``session.prepare()`` hands back under pp: this rank's stage (``.module``, with the user's parameter
    names) behind a forward that evaluates through the whole pipeline and refuses to train outside the schedule."""

    def __init__(self, stage: nn.Module, strategy: PipelineStrategy, whole: int) -> None:
        super().__init__()
        self.module = stage
        self.paratrain_param_count = whole  # the whole model's, as under every method (model_facts.param_count)
        self._strategy = strategy

    def forward(self, *args: Any) -> Any:
        if torch.is_grad_enabled():
            raise ConfigError("under --strategy pp the model is cut into stages, and model(x) cannot train: no rank "
                              "holds the whole model", hint=TRAIN_STEP_HINT + "; evaluate under torch.no_grad()")
        return self._strategy.evaluate(args)


class PipelineStrategy(OneReplica, Strategy, ScheduledStep):
    method = Method.PP
    options_type = PipelineOptions
    options: PipelineOptions
    supported_precision = frozenset({"fp32", "bf16-mixed"})
    native_precision = frozenset({"fp32", "bf16-mixed"})  # each stage runs its autocast itself (wrap)
    compilable = False
    clips_gradients = True  # the norm is over every stage's gradients, not this stage's alone
    _stage: nn.Module | None = None
    _removed: list[str]
    _times: dict[str, float]  # seconds of the stage's own forward and backward in the step running (forward_backward)
    _norm: float | None = None

    @classmethod
    def available(cls) -> Availability:
        try:
            from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe  # noqa: F401
        except ImportError:
            return Availability(False, f"torch {torch.__version__} has no torch.distributed.pipelining",
                                'pip install "torch>=2.4"')
        if not dist.is_available():
            return Availability(False, "this torch build has no torch.distributed", "pip install torch")
        return Availability.yes("torch.distributed.pipelining on " + ("GPU" if torch.cuda.is_available() else
                                                                      "CPU (gloo)"))

    def setup(self) -> None:
        self.device = _procgroup.join(self.env, str(self.method))
        self.join_one_replica()  # one replica over all ranks: each reads the whole batch
        self._schedules: dict[tuple, Any] = {}

    @property
    def last(self) -> int:
        return self.world_size - 1

    def init_context(self):
        return self.deferred_shapes()  # wrap() hands each stage its part of rank 0's model

    def wrap(self, model, optimizer):
        if optimizer is not None and optimizer.state:
            raise ConfigError("the optimizer has already taken steps; pp must cut the model before training",
                              hint="call session.prepare() before the first optimizer.step()")
        names = {id(p): n for n, p in model.named_parameters()}
        whole = param_count(model)
        if self._deferred:
            stage = self._stage_from_rank0(model)
        else:
            model.to(self.device)
            for tensor in [*model.parameters(), *model.buffers()]:
                dist.broadcast(tensor.data, src=0)  # every stage starts from the same model, as DDP does
            stage, self._removed = pipeline_split.stage_module(model, self.rank, self.world_size)
            stage.to(self.device)
        if optimizer is not None:  # the optimizer steps this stage's parameters; the others are freed
            mine = dict(stage.named_parameters())
            for group in optimizer.param_groups:
                group["params"] = [mine[names[id(p)]] for p in group["params"] if names.get(id(p)) in mine]
        checkpointed = bool(self.train is not None and self.train.activation_checkpointing)
        assert self.device is not None  # set by setup()
        amp.apply(stage, self.precision, self.device, cache=not checkpointed)
        self._stage = stage
        return PipelineModel(stage, self, whole), optimizer

    def _stage_from_rank0(self, model: nn.Module) -> nn.Module:
        """Under ``session.init_module()`` only rank 0 built the model; the others hold its shapes on the meta
        device. Each of them cuts its stage, makes room for it alone, and receives its tensors (buffers that are not
        in the state dict too, such as rotary tables) from rank 0, which then keeps its own stage."""
        assert self.device is not None  # set by setup()
        mine: list[tuple[str, torch.Tensor]] = []
        if self.rank != 0:
            stage, self._removed = pipeline_split.stage_module(model, self.rank, self.world_size)
            stage.to_empty(device=self.device)
            mine = [*stage.named_parameters(), *stage.named_buffers()]
        wanted: list[Any] = [None] * self.world_size
        dist.all_gather_object(wanted, [name for name, _ in mine])
        if self.rank == 0:
            every = dict([*model.named_parameters(), *model.named_buffers()])
            for peer in range(1, self.world_size):
                for name in wanted[peer]:
                    dist.send(every[name].detach().to(self.device).contiguous(), dst=peer)
            del every
            stage, self._removed = pipeline_split.stage_module(model, 0, self.world_size)
            stage.to(self.device)
        else:
            for _, tensor in mine:
                dist.recv(tensor.data, src=0)
        return stage

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, PipelineModel) else model

    # -- one micro-batch through the pipeline ------------------------------------------------------------------
    def chunks_for(self, batch: int) -> int:
        """Micro-batches for a batch of ``batch`` samples: the option (twice the stages by default), or the largest
        number below it that divides the batch: the schedule's micro-batches must all have the same shape."""
        want = min(self.options.chunks or 2 * self.world_size, batch)
        return next(n for n in range(want, 0, -1) if batch % n == 0)

    def _schedule(self, chunks: int, inputs: tuple, targets: torch.Tensor) -> Any:
        """One schedule per micro-batch shape: a stage learns its neighbours' shapes on its first step, so a batch
        of another size (an epoch's last) gets its own."""
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        key = (chunks, *(tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)), tuple(targets.shape))
        if key not in self._schedules:
            assert self._stage is not None and self.device is not None  # set by setup() and wrap()
            stage = PipelineStage(self._stage, self.rank, self.world_size, self.device)
            self._time(stage, "forward_one_chunk", "forward")
            self._time(stage, "backward_one_chunk", "backward")
            one_f_one_b = self.options.schedule == "1f1b" and chunks >= self.world_size
            cls = Schedule1F1B if one_f_one_b else ScheduleGPipe  # 1F1B needs a micro-batch per stage at least
            # scale_grads=False: the losses carry their weights. The schedule's own division would fall on every
            # gradient the stage holds, those of earlier micro-batches of a gradient accumulation too.
            self._schedules[key] = cls(stage, n_microbatches=chunks, loss_fn=self._loss, scale_grads=False)
        return self._schedules[key]

    def _time(self, stage: Any, method: str, phase: str) -> None:
        inner = getattr(stage, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self._times[phase] += time.perf_counter() - started

        setattr(stage, method, timed)

    def _loss(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._current_loss(output, target)

    def forward_backward(self, model: nn.Module, inputs: tuple, targets: torch.Tensor,
                         loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
                         weight: float) -> tuple[torch.Tensor, dict[str, float]]:
        batch = int(targets.shape[0])
        chunks = self.chunks_for(batch)
        schedule = self._schedule(chunks, inputs, targets)
        parts: list[torch.Tensor] = []

        def weighted(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            share = target.shape[0] / batch  # this micro-batch's part of the batch's mean loss
            loss = loss_fn(output, target)
            parts.append(loss.detach() * share)
            return loss * (share * weight)

        self._current_loss = weighted
        self._times = {"forward": 0.0, "backward": 0.0}
        started = time.perf_counter()
        try:
            if self.rank == 0 and self.rank == self.last:
                schedule.step(*inputs, target=targets, return_outputs=False)
            elif self.rank == 0:
                schedule.step(*inputs, return_outputs=False)
            elif self.rank == self.last:
                schedule.step(target=targets, return_outputs=False)
            else:
                schedule.step(return_outputs=False)
        except TypeError as exc:
            if (part := pipeline_split.missing_part(exc, self._removed)) is None:
                raise
            raise ConfigError(f"stage {self.rank}'s forward called {part}, which another stage holds: the model's "
                              "forward must skip parts that are None", hint=pipeline_split.PLAN_HINT) from None
        wall = time.perf_counter() - started
        # A new schedule's first step may run the loss once more to learn its shapes: the last ``chunks`` count.
        loss = torch.stack(parts[-chunks:]).sum() if parts else torch.zeros((), device=self.device)
        loss = loss.to(self.device, torch.float32)
        dist.broadcast(loss, src=self.last)  # every rank returns the batch's loss
        phases = dict(self._times)
        phases["bubble"] = max(0.0, wall - phases["forward"] - phases["backward"])
        return loss, phases

    def evaluate(self, args: tuple) -> Any:
        """Forward only, the whole batch at once: each stage runs its part and hands the result on; every rank
        returns the last stage's output."""
        assert self._stage is not None
        if self.rank == 0:
            hidden = self._stage(*args)
        else:
            box: list[Any] = [None]
            dist.recv_object_list(box, src=self.rank - 1, device=self.device)
            hidden = self._stage(box[0].to(self.device))
        if self.rank < self.last:
            dist.send_object_list([hidden], dst=self.rank + 1, device=self.device)
        out: list[Any] = [hidden if self.rank == self.last else None]
        dist.broadcast_object_list(out, src=self.last, device=self.device)
        return out[0].to(self.device)

    # -- optimizer step, state -----------------------------------------------------------------------------
    def step(self, optimizer: torch.optim.Optimizer) -> None:
        clip = getattr(self.train, "grad_clip", None)
        if clip is not None:
            assert self._stage is not None
            grads = [p.grad for p in self._stage.parameters() if p.grad is not None]
            squares = torch.zeros((), device=self.device)
            for grad in grads:
                squares += grad.detach().float().pow(2).sum()
            dist.all_reduce(squares)  # the model's norm: every stage's gradients
            norm = squares.sqrt()
            self._norm = float(norm)
            scale = torch.clamp(clip / (norm + 1e-6), max=1.0)
            for grad in grads:
                grad.mul_(scale.to(grad.dtype))
        optimizer.step()

    def grad_norm(self, model: nn.Module) -> float | None:
        return self._norm

    def model_keys(self, local: list[str]) -> set[str]:
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, list(local))
        return {key for keys in gathered for key in keys}

    def full_model_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        local = {k: v.detach().cpu() for k, v in self.unwrap(model).state_dict().items()}
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, local)
        return {k: v.to(self.device) for part in gathered for k, v in part.items()}

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)
