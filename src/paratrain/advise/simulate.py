"""One training step of the user's own model under each torch-native method, on fake tensors, at the target world
size: per-rank peak memory without the hardware (``paratrain advise --simulate``).

Why: the formula in :mod:`paratrain.advise.memory` knows a transformer's shape, not the model's code — an extra
buffer, an unfused attention, a loss that keeps its logits in fp32 are invisible to it. Here the model itself runs:
built under torch's ``FakeTensorMode`` (shapes, dtypes and devices, no storage), wrapped by paratrain's own strategy
classes (the same ``wrap`` a real run calls, so a change to how a method shards is simulated too), joined to a fake
process group of the target size (torch's ``fake`` backend: every collective returns at once, no peer exists), and
stepped once — forward, loss, backward, optimizer step — twice over, so the second step holds the optimizer state as a
steady-state step does. torch's memory trackers (``torch.distributed._tools``: ``MemTracker``, and
``FSDPMemTracker`` under FSDP) count every storage the step allocates and frees; the peak is the simulated rank's.

What torch's tools cannot follow is said, per method, and the formula's figure stands in (``how`` = "formula"):
DeepSpeed and Horovod run their own engines; DataParallel drives several devices from one process; pipeline stages
exchange their shapes through ``send_object_list``, which a fake process group cannot answer. DDP's reducer checks
every parameter's data across ranks at construction, which fake tensors do not have: the step runs as the replica
it is, and DDP's gradient buckets (its C++ reducer's copy of the gradients) are added — ``how`` = "step + buckets".

The split of work between files: this one runs a step; :mod:`paratrain.advise.simulate_models` turns what ``advise
--model`` names into something that can be built under the fake mode and fed a batch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from paratrain.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from paratrain.advise.memory import Plan
    from paratrain.advise.simulate_models import Trainable

# Methods a step is simulated for, by their name (the part of the spec before ":"); the rest take the formula.
TRACED = ("single", "ddp", "fsdp", "tp", "fsdp+tp")
CANNOT_FOLLOW = {
    "deepspeed": "DeepSpeed's engine keeps its state in flat buffers its own C++ ops fill, and needs a real "
                 "process group to build them",
    "horovod": "Horovod's collectives run in its own C++ background thread, outside torch's dispatcher",
    "dp": "DataParallel drives every GPU from one process; torch's trackers count one device's tensors",
    "pp": "pipeline stages exchange their tensors' shapes with send_object_list, which a fake process group cannot "
          "answer",
}


@dataclass
class Simulated:
    """One method's simulated peak on one rank, in bytes. ``how``: "traced" (the whole step ran on fake tensors),
    "step + buckets" (ddp), or "formula" (torch's tools cannot follow the method: ``peak`` is None, ``note`` says
    why)."""

    spec: str
    how: str
    peak: int | None = None
    by_kind: dict[str, int] = field(default_factory=dict)  # the tracker's categories at the peak
    note: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "how": self.how, "peak_bytes": self.peak, "by_kind": self.by_kind,
                "note": self.note, "seconds": round(self.seconds, 2)}


def simulate(trainable: Trainable, spec: str, plan: Plan, *, rank: int = 0, foreach: bool | None = None) -> Simulated:
    """Rank ``rank``'s peak bytes in one steady-state training step of ``trainable`` under method ``spec`` on
    ``plan.ranks`` ranks, ``plan.micro_batch`` samples per forward pass, in ``plan.precision``, with
    ``plan.optimizer``. ``foreach``: the optimizer's multi-tensor path (None: torch's default for the device, which is
    off on a CPU and on on a GPU)."""
    name = spec.partition(":")[0]
    if name not in TRACED:
        return Simulated(spec, "formula", note=CANNOT_FOLLOW.get(name, "not a torch-native method"))
    started = time.perf_counter()
    with fake_world(plan.ranks, rank):
        peak, kinds, extra = _one_step(trainable, spec, plan, foreach)
    how, note = "traced", ""
    if extra:
        how = "step + buckets"
        note = (f"DDP's reducer needs real tensors to start: its gradient buckets ({extra / (1 << 20):.1f} MiB, a "
                "copy of the gradients) are added to the traced step")
    return Simulated(spec, how, peak + extra, kinds, note, time.perf_counter() - started)


@contextlib.contextmanager
def fake_world(ranks: int, rank: int) -> Iterator[None]:
    """A fake process group of ``ranks`` ranks, this process being ``rank``, for as long as the block runs; refused
    when a real one is already up (a training process must not have its group replaced)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise ConfigError("a step cannot be simulated inside a distributed run (a process group is already up)",
                          hint="run paratrain advise --simulate on its own")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=ranks)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _strategy(spec: str, plan: Plan) -> Any:
    """paratrain's own strategy object for ``spec``, set up as its ``setup()`` would be on the fake group (its
    ``setup`` joins a real one), so that ``wrap`` is the one a real run calls."""
    import torch
    import torch.distributed.device_mesh as device_mesh

    from paratrain.distenv import DistEnv
    from paratrain.strategies import registry

    cls, options = registry.resolve(spec)
    import torch.distributed as dist

    env = DistEnv(rank=dist.get_rank(), world_size=plan.ranks, local_world_size=plan.ranks, launched=True)
    strategy = cls(options, env)
    strategy.device = torch.device("cpu")
    strategy.precision = plan.precision
    name = spec.partition(":")[0]
    if name == "tp":
        strategy._mesh = device_mesh.init_device_mesh("cpu", (plan.ranks,), mesh_dim_names=("tp",))
    elif name == "fsdp+tp":
        tp = strategy._tp
        if tp < 1 or plan.ranks % tp:
            raise ConfigError(f"{spec} needs a number of ranks that is a multiple of {tp} ({plan.ranks} given)")
        strategy._mesh = device_mesh.init_device_mesh("cpu", (plan.ranks // tp, tp), mesh_dim_names=("dp", "tp"))
    return strategy


def _optimizer(params: Any, name: str, foreach: bool | None) -> torch.optim.Optimizer:
    import torch

    if name in ("adam", "adamw"):
        cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
        return cls(params, lr=1e-3, foreach=foreach)
    return torch.optim.SGD(params, lr=1e-3, momentum=0.9 if name == "sgd-momentum" else 0.0, foreach=foreach)


def _one_step(trainable: Trainable, spec: str, plan: Plan, foreach: bool | None) -> tuple[int, dict[str, int], int]:
    """(peak bytes, the tracker's categories at the peak, bytes added beside the trace: DDP's buckets)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    from paratrain import precision as amp

    name = spec.partition(":")[0]
    with _fake_friendly(), FakeTensorMode():
        strategy = None if name in ("single", "ddp") else _strategy(spec, plan)
        model = trainable.build()
        if plan.precision == "bf16-true":  # as the Session's model.to(bfloat16), before any wrapper; a fake
            # parameter cannot be swapped for its cast (module.to's way for tensor subclasses), its data can
            for tensor in (*model.parameters(), *model.buffers()):
                if tensor.is_floating_point():
                    tensor.data = tensor.data.to(torch.bfloat16)
        if plan.checkpointing:
            from paratrain.blocks import checkpoint_activations

            checkpoint_activations(model, plan.checkpointing)
        optimizer = _optimizer(model.parameters(), plan.optimizer, foreach)
        if strategy is not None:
            strategy.train = _train_options(plan)
            model, optimizer = strategy.wrap(model, optimizer)
            native = plan.precision in strategy.native_precision
            cache = not (plan.checkpointing or strategy.frees_parameters_after_forward)
        else:
            native, cache = False, not plan.checkpointing
        amp.apply(model, plan.precision, torch.device("cpu"), autocast=not native, cache=cache)
        inputs, targets = trainable.batch(plan.micro_batch, plan.seq_len)

        def step() -> None:
            loss = trainable.loss(model(*inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        # The first step creates the optimizer state; the tracked one is the second, a steady-state step. Tracking
        # both and resetting in between is not the same: the trackers' reset clears the modules' figures, not the
        # peak, and tp's first step (its optimizer state born as DTensors) peaked 11 % above a real run's.
        step()
        fsdp = name == "fsdp"
        tracker = FSDPMemTracker(model, optimizer) if fsdp else MemTracker()
        if fsdp:
            tracker.track_inputs((*inputs, targets))
        else:
            tracker.track_external(model, optimizer, *inputs, targets)
        with tracker:
            step()
        snapshot = next(iter(tracker.get_tracker_snapshot("peak").values()), {})
        buckets = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad) \
            if name == "ddp" else 0
    kinds = {str(getattr(k, "value", k)): int(v) for k, v in snapshot.items() if v}
    return int(snapshot.get("Total", 0)), kinds, buckets


def _train_options(plan: Plan) -> Any:
    """The Session's training options a strategy reads in ``wrap`` (precision, checkpointing)."""
    from paratrain.options import TrainOptions

    return TrainOptions(precision=plan.precision, activation_checkpointing=plan.checkpointing or False)


@contextlib.contextmanager
def _fake_friendly() -> Iterator[None]:
    """Three things a real run does that fake tensors cannot, undone when the block ends:
    - ``module.to(device)`` of a module already there: torch swaps each fake parameter with itself and fails
      ("Couldn't swap"); such a call changes nothing, so it returns the module;
    - a device mesh is bookkeeping of real rank numbers, built from a real tensor: it is built outside the fake mode
      (FSDP builds one for fsdp+tp inside ``fully_shard``);
    - FSDP's ``wrap`` loads rank 0's initial values into the shards; fake values need no loading.
    """
    import torch
    import torch.distributed.checkpoint.state_dict as state_dict
    import torch.distributed.device_mesh as device_mesh
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    original_to, original_mesh, original_load = torch.nn.Module.to, DeviceMesh.__init__, state_dict.set_model_state_dict
    original_init_mesh = device_mesh.init_device_mesh

    def to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        device = args[0] if len(args) == 1 and not kwargs else kwargs.get("device") if not args else None
        if isinstance(device, (str, torch.device)) and set(kwargs) <= {"device"}:
            wanted = torch.device(device).type
            if all(t.device.type == wanted for t in [*self.parameters(), *self.buffers()]):
                return self
        return original_to(self, *args, **kwargs)

    def mesh_init(self: DeviceMesh, *args: Any, **kwargs: Any) -> None:
        with unset_fake_temporarily():
            original_mesh(self, *args, **kwargs)

    def init_mesh(*args: Any, **kwargs: Any) -> DeviceMesh:
        with unset_fake_temporarily():
            return original_init_mesh(*args, **kwargs)

    torch.nn.Module.to = to  # type: ignore[method-assign]
    DeviceMesh.__init__ = mesh_init  # type: ignore[method-assign]
    device_mesh.init_device_mesh = init_mesh
    state_dict.set_model_state_dict = lambda *args, **kwargs: None
    try:
        yield
    finally:
        torch.nn.Module.to = original_to  # type: ignore[method-assign]
        DeviceMesh.__init__ = original_mesh  # type: ignore[method-assign]
        device_mesh.init_device_mesh = original_init_mesh
        state_dict.set_model_state_dict = original_load


def simulate_methods(trainable: Trainable, specs: list[str], plan: Plan, *,
                     foreach: bool | None = None, on_done: Callable[[Simulated], None] | None = None
                     ) -> dict[str, Simulated]:
    """:func:`simulate` for each spec; one that fails to trace is reported as the formula's, with the reason."""
    out: dict[str, Simulated] = {}
    for spec in specs:
        try:
            out[spec] = simulate(trainable, spec, plan, foreach=foreach)
        except ConfigError as exc:
            out[spec] = Simulated(spec, "formula", note=str(exc))
        except Exception as exc:
            out[spec] = Simulated(spec, "formula", note=f"torch's trackers could not follow it: "
                                                        f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        if on_done is not None:
            on_done(out[spec])
    return out


# -- advise --simulate: a line per torch method beside the formula's figure ------------------------------------------
def attach(result: dict[str, Any], trainable: Trainable, plan: Plan) -> None:
    """Simulate every torch method of ``result`` (advise's) and put the figure in its row as ``simulated``. Under the
    GPU's optimizer path (foreach), as the GPUs advise plans for would run it."""
    rows = [row for row in result["methods"] if row["framework"] == "torch" and row["runnable"]
            and not (row["unusable_because"] or "").startswith("does not run ")]  # refuses the precision
    done = simulate_methods(trainable, [row["method"] for row in rows], plan, foreach=True)
    for row in rows:
        row["simulated"] = done[row["method"]].to_json()


def render(result: dict[str, Any]) -> None:
    """The simulated table under advise's own: each torch method's simulated peak beside the formula's total, how it
    was found, and why a method kept the formula's."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from paratrain import console

    table = Table(title="Simulated: one training step of this model on fake tensors, peak per GPU in GiB "
                  "(busiest rank; rank 0)", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("method", "simulated", "formula", "diff", "how"):
        table.add_column(col, justify="left" if col in ("method", "how") else "right", no_wrap=col == "method")
    why: dict[str, list[str]] = {}
    for row in result["methods"]:
        sim = row.get("simulated")
        if sim is None:
            continue
        formula = row["per_rank_bytes"]["total"]
        peak = sim["peak_bytes"]
        diff = f"{(peak - formula) / formula * 100:+.0f} %" if peak and formula else ""
        table.add_row(escape(row["label"]), "—" if peak is None else f"{peak / (1 << 30):.3g}",
                      f"{formula / (1 << 30):.3g}", diff, sim["how"])
        if sim["note"]:
            why.setdefault(sim["note"], []).append(row["label"])
    console.out.print(table)
    for note, labels in why.items():
        console.out.print(f"[dim]{escape(', '.join(labels))}: {escape(note)}[/]", highlight=False)
