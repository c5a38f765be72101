"""What every launcher shares: the plan it makes, the protocol it implements, the registry that names it.

A launcher (a *backend* here, so as not to clash with the ``paratrain.launcher`` package) starts a method's
processes and supervises them: ``local`` (one process, a fork of this one), ``torchrun`` (torch.distributed.run),
``horovodrun`` (Horovod's runner) and ``tfconfig`` (one process per TensorFlow worker, each with its TF_CONFIG).
:func:`paratrain.launcher.plan.build_plan` does what is the same for all of them — resolve the method, check the
script, collect the workers' environment — and hands a :class:`Launch` to the method's backend, which turns it into a
:class:`LaunchPlan` (its command line, the process count) and later runs it. Adding a launcher is one module with a
class implementing :class:`Backend` and one line in :data:`BACKENDS` (or :func:`register` from a plug-in or a test);
a method names the backends it can use in its registry entry.

Also here, once: the process count's default and GPU cap, the signal a launch was interrupted by, the hint for a
stalled job, and the shell line that shows a plan.
"""

from __future__ import annotations

import functools
import importlib
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from paratrain.errors import ConfigError, LaunchError
from paratrain.metrics import MEMORY_KINDS

if TYPE_CHECKING:
    from paratrain.launcher.config import RunConfig
    from paratrain.launcher.threads import ThreadChoice

STALL_HINT = ("every rank must make the same collective calls in the same order (evaluate on all ranks, or let "
              "the others wait in session.barrier()); raise --timeout / --stall-timeout if a rank is just slow")
SHUTDOWN_GRACE_S = 3  # seconds workers get to exit on a signal before they are killed


class Interrupted(LaunchError):
    """The launcher itself got a signal (Ctrl-C, a scheduler's SIGTERM); the workers are gone."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}; every process of the job was stopped", exit_code=128 + signum)


@dataclass
class Launch:
    """What the method decided before any backend is asked: the backend only adds how processes start."""

    config: RunConfig
    method_cls: Any  # the Strategy class (ran_as is asked after the job: what really ran)
    options: Any  # its StrategyOptions
    spec: str  # normalised method spec, e.g. "fsdp:shard=grad_op"
    script: Path
    env: dict[str, str]  # the workers' environment so far: method, options, training options, checkpoints
    details: dict[str, Any] | None = None  # what the method derived from the options (DeepSpeed: its config)

    @property
    def method(self) -> str:
        return str(self.method_cls.method)


@dataclass(frozen=True)
class LaunchPlan:
    config: RunConfig
    spec: str  # normalised method spec
    launcher: str  # the backend's name (BACKENDS)
    nproc: int  # processes on this node (mirrored: its one process holds nproc replicas, see details)
    env: dict[str, str] = field(default_factory=dict)  # added to the workers' environment
    argv: list[str] = field(default_factory=list)  # the backend's arguments, or the local command
    threads: ThreadChoice | None = None  # CPU threads per process, and why
    details: dict[str, Any] | None = None
    method_cls: Any = None

    @property
    def world_size(self) -> int:
        return self.nproc * self.config.nnodes

    @property
    def backend(self) -> Backend:
        return backend(self.launcher)

    def command_line(self) -> str:
        """What this launch is, as a shell command a user could run themselves."""
        return self.backend.shell_line(self)


class Backend(Protocol):
    """A way to start and supervise a method's processes."""

    name: str
    starts_workers: bool  # False: the script runs in this process's fork (no worker processes of its own)
    runs_torch: bool  # torch's own code runs in this process (torchrun's agent): the launcher imports torch

    def plan(self, launch: Launch) -> LaunchPlan:
        """Check what this backend cannot honour (one line each) and make the plan."""

    def shell_line(self, plan: LaunchPlan) -> str:
        """The plan as a command a user could type (dry-run shows it)."""

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        """Run to completion; raise :class:`LaunchError` naming the rank that failed first, or
        :class:`Interrupted`. ``notes`` is the folder the workers write their notes to (launcher/notes.py)."""

    def ran_line(self, plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
        """The job's last line: what ran, read back from the workers' done notes (never the flag), and how long it
        took. ``spec`` is the method the job reported (a native DeepSpeed script's own stage)."""

    def never_joined(self) -> str:
        """How a script that never joined this backend's job is described ("joined a process group (…)")."""


class ModuleLauncher:
    """What a launcher that is a Python module's main, one process per rank (torchrun, horovodrun), shares: its
    shell line, the processes line at the end, and the wording for a script that never joined its job. A subclass
    gives ``name``, ``module``, ``joined_what`` and implements ``plan`` and ``run``."""

    name: str
    module: str  # what `python -m` runs
    joined_what: str  # "a process group (no paratrain.Session, no init_process_group)"
    starts_workers = True
    runs_torch = False

    def shell_line(self, plan: LaunchPlan) -> str:
        return module_line(plan, self.module)

    def ran_line(self, plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
        return processes_line(plan, done, spec, elapsed)

    def never_joined(self) -> str:
        return f"joined {self.joined_what}"


# name -> "module:attribute" (a Backend instance), imported on first use: a worker never imports a launcher.
BACKENDS: dict[str, str] = {
    "local": "paratrain.launcher.local:BACKEND",
    "torchrun": "paratrain.launcher.torchrun:BACKEND",
    "horovodrun": "paratrain.launcher.horovodrun:BACKEND",
    "tfconfig": "paratrain.launcher.tfrun:BACKEND",
}
_loaded: dict[str, Backend] = {}


def register(name: str, target: str | Backend) -> None:
    """Add a backend: ``"package.module:ATTRIBUTE"`` or the object itself."""
    if isinstance(target, str):
        BACKENDS[name] = target
        _loaded.pop(name, None)
    else:
        BACKENDS[name] = f"<object {name}>"
        _loaded[name] = target


def unregister(name: str) -> None:
    BACKENDS.pop(name, None)
    _loaded.pop(name, None)


def backend(name: str) -> Backend:
    if name not in _loaded:
        target = BACKENDS.get(name)
        if target is None:
            raise ConfigError(f'no launcher "{name}" (known: {", ".join(BACKENDS)})')
        module, _, attr = target.partition(":")
        _loaded[name] = getattr(importlib.import_module(module), attr)
    return _loaded[name]


def env_line(env: Mapping[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def module_line(plan: LaunchPlan, module: str) -> str:
    """``ENV… python -m MODULE ARGS…``: the shell line of a backend that is a Python module's main."""
    return f"{env_line(plan.env)} {shlex.join([sys.executable, '-m', module, *plan.argv])}".strip()


def processes(nproc: int | None, gpus: int, what: str = "processes") -> int:
    """--nproc, or one per visible GPU (2 on a CPU-only machine); never more than the GPUs (one per GPU)."""
    count = nproc or (gpus if gpus else 2)
    if gpus and count > gpus:
        raise ConfigError(f"--nproc {count} asks for more {what} than the {gpus} visible GPUs",
                          hint=f"use --nproc {gpus} or fewer (one per GPU)")
    return count


def count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def processes_line(plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
    """``fsdp × 2 processes (CPU) finished in 3.1 s; peak tensor memory per rank 95–96 MiB (…)``: what a torch
    launch ran, and the memory each rank's training needed, as the ranks measured it."""
    where = "GPU" if gpu_count() else "CPU"
    line = f"{spec} × {count(plan.world_size, 'process', 'processes')} ({where}) finished in {elapsed:.1f} s"
    return line + memory_note(done, plan.nproc)


def memory_note(done: Mapping[int, dict], nproc: int) -> str:
    """``; peak tensor memory per rank 41 MiB (…)`` when every local rank reported one of the same kind, else nothing.

    On a CPU the figure is compare's — the tensors' peak over two profiled steps (metrics.RUN_PEAK_WINDOW) — with the
    process's RSS beside it, named for what it is: it also holds torch's and the method's own memory and what the
    allocator keeps after a free, the same hundreds of MB under every method, so it cannot rank methods. The RSS
    alone is shown, labelled so, only when no rank reached the profiled steps."""
    peaks = [p for d in done.values() if isinstance(p := d.get("peak_mem"), dict)]
    if len(peaks) != nproc or len(done) != nproc:
        return ""
    kinds = {p["kind"] for p in peaks}
    if len(kinds) != 1 or (kind := kinds.pop()) not in MEMORY_KINDS:
        return ""
    shown = _range([p["bytes"] for p in peaks])
    rss = "process RSS above the Session's start, framework and allocator included"
    if kind == "cpu_tensors":
        steps = peaks[0].get("steps") or []
        over = f"steps {steps[0]}–{steps[1]}, " if len(steps) == 2 else ""
        beside = [b for p in peaks if isinstance(b := p.get("rss_above_start"), int)]
        aside = f"; {rss}: {_range(beside)}" if len(beside) == len(peaks) else ""
        return f"; peak tensor memory per rank {shown} ({over}compare's figure{aside})"
    if kind == "rss_above_start":
        return f"; peak memory per rank {shown} ({rss}; the tensors' peak needs 3 optimizer steps)"
    return f"; peak memory per rank {shown} ({MEMORY_KINDS[kind]})"


def _range(values: list[int]) -> str:
    """``41–42 MiB``, finer below 10 MiB (a small model's tensors)."""
    low, high = (_mib(f(values)) for f in (min, max))
    return low if low == high else f"{low.removesuffix(' MiB')}–{high}"


def _mib(value: float) -> str:
    mib = value / 2**20
    return f"{mib:.2f} MiB" if mib < 1 else f"{mib:.1f} MiB" if mib < 10 else f"{round(mib)} MiB"


def refused(notes: Path) -> LaunchError | None:
    """A paratrain error the ranks raised alike (notes.refusal), as the launcher's one line: its message and its exit
    code, no rank (every launcher checks this before naming the rank that failed first)."""
    from paratrain.launcher import notes as notes_

    said = notes_.refusal(notes)
    return None if said is None else LaunchError(str(said["error"]), exit_code=int(said.get("code", 2)))


def gpu_count() -> int:
    """Visible CUDA devices, as torch sees them (the launcher has imported torch for a torch method)."""
    from paratrain.launcher.torch_import import load_torch

    torch = load_torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def keep_signals() -> Callable[[], None]:
    """Remember SIGINT/SIGTERM's handlers; the returned function puts them back (a backend that installs its own, or
    lets a runner install them, restores the caller's afterwards)."""
    import contextlib

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in saved.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, handler)

    return restore


def holding_sigint(argv: list[str]) -> list[str]:
    """``argv`` started with SIGINT blocked, where this system's ``env`` can do it (GNU coreutils ≥ 8.31).

    A new interpreter takes Python's own SIGINT handler from its first instruction, long before the worker's first
    line: a Ctrl-C that reached a rank then (forwarded by torchrun, or from the terminal to TensorFlow's workers)
    printed an import's ``KeyboardInterrupt`` traceback under the launcher's one line. A blocked signal is not lost,
    only held: the worker unblocks it once its own quiet handler is in place, and the held Ctrl-C ends it then.
    Elsewhere the command is unchanged (the window stays, as under torchrun)."""
    env = _blocking_env()
    return [env, "--block-signal=INT", *argv] if env else list(argv)


@functools.cache
def _blocking_env() -> str | None:
    env = shutil.which("env")
    if env is None:
        return None
    try:
        done = subprocess.run([env, "--block-signal=INT", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return env if done.returncode == 0 else None
