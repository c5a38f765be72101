"""Measurements taken from inside ``Session`` when a measuring launcher asks for them.

``paratrain compare`` sets ``PARATRAIN_METRICS=DIR``; each rank then appends JSON lines to ``DIR/rank<r>.jsonl``:
one per optimizer step (wall time, step duration, this rank's share of the global loss, samples it processed and
the replica it belongs to, so that ranks sharing a replica count its samples once), the
bytes of model state the rank holds (after its first step, when gradients and optimizer state exist), values the
script logs with :func:`log`, and a summary at close (peak memory). Without the variable nothing is written, so a
user's script is measured from the outside, unchanged; on a CPU, a plain ``paratrain run`` still counts its tensors'
peak over two steps (:data:`RUN_PEAK_WINDOW`), the figure compare reports, for the job's last line.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from paratrain.distenv import METRICS_VAR, PROFILE_VAR

if TYPE_CHECKING:  # torch is imported where it is used: a Keras script's recorder needs this module too
    import torch

PHASES = ("data", "forward", "backward", "bubble", "optimizer")  # bubble: a pipeline stage waiting on its peers


def _local_nbytes(t: torch.Tensor) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t  # a DTensor holds only its shard here
    return local.numel() * local.element_size()


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state this rank actually holds."""
    import torch

    params = sum(_local_nbytes(p) for p in model.parameters())
    grads = sum(_local_nbytes(p.grad) for p in model.parameters() if p.grad is not None)
    optim = 0
    if optimizer is not None:
        for per_param in optimizer.state.values():
            optim += sum(_local_nbytes(v) for v in per_param.values() if isinstance(v, torch.Tensor))
    return {"params": params, "grads": grads, "optimizer": optim, "total": params + grads + optim}


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


# The peak memory a rank's training needed on a CPU: the process's RSS high-water mark, reset when the Session starts
# (Linux: writing 5 to /proc/self/clear_refs), minus the RSS at that moment — so the interpreter, torch and the
# script's imports (hundreds of MB, the same under every method) are not counted, and what the method, the model,
# its optimizer and the activations added is. None where the mark cannot be reset.
_rss_at_start: int | None = None


def _status_bytes(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    line = next(line for line in text.splitlines() if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # kB


def start_peak_rss() -> None:
    """Reset the RSS high-water mark and remember the RSS now: the Session's start (an earlier Session's tensor
    peak is forgotten too)."""
    global _rss_at_start, _current
    _current = None
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _rss_at_start = _status_bytes("VmRSS")
    except (OSError, StopIteration, ValueError):
        _rss_at_start = None


def peak_rss_above_start() -> int | None:
    """The high-water mark since :func:`start_peak_rss`, above the RSS then (None: not started, or no /proc)."""
    if _rss_at_start is None:
        return None
    try:
        return max(_status_bytes("VmHWM") - _rss_at_start, 0)
    except (OSError, StopIteration, ValueError):
        return None


# The peaks peak_memory() reports, in words (the job's last line and compare's memory plot say which was measured).
MEMORY_KINDS = {"cuda": "CUDA max allocated", "cpu_tensors": "CPU tensors' peak over the profiled steps",
                "rss_above_start": "RSS above the Session's start"}


# On a CPU, `paratrain run` without compare counts the tensors' peak over the 2 steps after step 1 — compare's figure
# (tensor_peak.py), so that the two commands rank methods alike. The process's RSS is no such figure: glibc keeps
# freed activations in its heap, and torch, the method's libraries and their threads take the same hundreds of MB
# under every method, so fsdp×2 could show more RSS than single while each of its ranks holds half the tensors.
RUN_PEAK_WINDOW = (1, 2)


def peak_memory() -> dict[str, Any] | None:
    """This rank's peak, for the job's last line: CUDA's max allocated where a GPU was used; else the CPU tensors'
    peak over the profiled steps (with the RSS above the Session's start beside it), or, when those steps never ran,
    the RSS alone; None when nothing was measured (a script without a Session on a CPU)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return {"kind": "cuda", "bytes": int(torch.cuda.max_memory_allocated())}
    above = peak_rss_above_start()
    tensors = _current.cpu_tensor_peak if _current is not None else None
    if tensors is not None:
        return {"kind": "cpu_tensors", "bytes": tensors, "rss_above_start": above, "steps": _current.profiled_steps}
    return {"kind": "rss_above_start", "bytes": above} if above is not None else None


class StepRecorder:
    """One rank's measurements. With a file (compare): steps, state, logged values, a profile and a summary. Without
    one (``paratrain run``): only the CPU tensors' peak over ``window`` (:data:`RUN_PEAK_WINDOW`), for the job's
    last line."""

    def __init__(self, path: Path | None, replica: int = 0, window: tuple[int, int] | None = None) -> None:
        self._replica = replica  # the rank's data-parallel rank: ranks of one replica process the same samples
        self._file: IO[str] | None = path.open("a", buffering=1) if path else None
        self._last: float | None = None
        self._loss = 0.0
        self._samples = 0
        self._state_written = False
        self._phases = dict.fromkeys(PHASES, 0.0)  # seconds in each phase of the current step
        self._forward_from: float | None = None  # when the last batch was handed out: forward runs from there
        self._profile_at, self._profile_steps = window if window is not None else _profile_window()
        self._peak_only = path is None  # no file: the tensors' peak is all that is measured
        self._profiler: Any = None
        self._world = 1
        self.comm_visible = True  # False: the profiler cannot see the method's collectives (Horovod's)
        self._live_at_window: int | None = None  # CPU tensor bytes alive when the profiled steps began
        self._window_at = 0  # the step after which they began
        self._cpu_tensor_peak: int | None = None  # and their peak over those steps (tensor_peak.py)

    @property
    def enabled(self) -> bool:
        return self._file is not None

    @property
    def cpu_tensor_peak(self) -> int | None:
        return self._cpu_tensor_peak

    @property
    def profiled_steps(self) -> list[int]:
        """The steps the tensors' peak was counted over (first, last)."""
        return [self._window_at + 1, self._window_at + self._profile_steps] if self._window_at else []

    @classmethod
    def from_env(cls, rank: int, replica: int | None = None) -> StepRecorder:
        global _current
        folder = os.environ.get(METRICS_VAR)
        if not folder:
            _current = cls(None, window=_run_window())
            return _current
        Path(folder).mkdir(parents=True, exist_ok=True)
        _current = cls(Path(folder) / f"rank{rank}.jsonl", rank if replica is None else replica)
        return _current

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")

    def data_ready(self, seconds: float) -> None:
        """The loader spent ``seconds`` producing a batch (and moving it to the device)."""
        if self._file is None:
            return
        self._phases["data"] += seconds
        self._forward_from = time.perf_counter()

    def add(self, phase: str, seconds: float) -> None:
        if self._file is not None:
            self._phases[phase] += seconds

    def backward_started(self) -> None:
        """The time since the batch was handed out was forward (and the loss)."""
        if self._file is not None and self._forward_from is not None:
            self._phases["forward"] += time.perf_counter() - self._forward_from
            self._forward_from = None

    def backward(self, loss: torch.Tensor, weight: float, samples: int) -> None:
        """Account one micro-batch: its weighted loss (the rank's share of the global mean) and sample count."""
        if self._file is None:
            return
        if self._last is None:
            self._last = time.perf_counter()
        self._loss += float(loss.detach()) * weight
        self._samples += samples

    def step_end(self, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                 held: Callable[[torch.nn.Module, Any], dict[str, int]] = state_bytes) -> None:
        """``held`` counts the model state this rank holds (the strategy's own count: see Strategy.state_bytes)."""
        if self._file is None:
            self._stop_profile(step)  # the tensors' peak of a plain run
            return
        if self._last is None:
            self._last = time.perf_counter()
        if not self._state_written:
            import torch

            from paratrain.model_facts import model_facts, param_count

            # The thread count the process really trains with, read here rather than trusted from the launcher.
            # param_count is the whole model's, however sharded: `advise` matches measurements to the model it is
            # asked about by it.
            # model facts (dropout, BatchNorm, convolutions) let compare say why losses may differ between methods.
            self.write({"state_bytes": held(model, optimizer), "threads": torch.get_num_threads(),
                        "param_count": param_count(model),
                        "model": model_facts(model)})
            self._state_written = True
        now = time.perf_counter()
        record = {"step": step, "t": time.time(), "dt": now - self._last, "loss": self._loss,
                  "samples": self._samples, "replica": self._replica, "phases": self._phases}
        if self._profiler is not None:
            record["profiled"] = True  # slower under the profiler: left out of the throughput
        self.write(record)
        self._stop_profile(step)
        self._last, self._loss, self._samples = time.perf_counter(), 0.0, 0
        self._phases = dict.fromkeys(PHASES, 0.0)

    def gradients_freed(self, step: int, unseen: Callable[[], int] = lambda: 0) -> None:
        """Step ``step`` is over and its gradients are freed: the profiled steps start here when ``step`` is START
        (so whole steps are inside), and end COUNT steps later (:meth:`_stop_profile`). Not earlier: torch's
        profiler cannot see the free of a tensor allocated before it started, so the gradients freed after the
        step would count as alive in the CPU tensors' peak. ``unseen`` gives the bytes the method holds where Python
        cannot see them (DDP's buckets: Strategy.unseen_cpu_bytes)."""
        if self._profile_at is None:
            return
        if step == self._profile_at and self._profiler is None:
            import torch.distributed as dist
            from torch.profiler import ProfilerActivity, profile

            from paratrain import tensor_peak

            self._world = dist.get_world_size() if dist.is_initialized() else 1
            import torch

            if tensor_peak.profiler_in_use():  # the script's own: a second one would take its events away
                self._profile_at = None
                return
            cuda = torch.cuda.is_available()
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            if not cuda:  # a CPU has no allocator statistics: the profiler's memory events are the count
                self._live_at_window = tensor_peak.live_cpu_tensor_bytes() + unseen()
                self._window_at = step
            self._profiler = profile(activities=activities, record_shapes=not self._peak_only,
                                     profile_memory=not cuda)
            with tensor_peak.without_profiler_chatter():
                self._profiler.__enter__()
            self._last = time.perf_counter()  # the next step is timed from here: opening the window is not in it

    def _stop_profile(self, step: int) -> None:
        if self._profile_at is None or self._profiler is None or step < self._profile_at + self._profile_steps:
            return
        from paratrain import tensor_peak
        from paratrain.breakdown import analyse, not_measured

        # what is alive as the window closes, read inside it: an address freed unseen and handed out again later
        # would otherwise pass for alive
        alive = tensor_peak.live_cpu_storage_pointers() if self._live_at_window is not None else None
        with tensor_peak.without_profiler_chatter():
            self._profiler.__exit__(None, None, None)
        if self._live_at_window is not None:
            above = tensor_peak.peak_above_window_start(self._profiler, alive)
            self._cpu_tensor_peak = None if above is None else self._live_at_window + above
        if self._peak_only:
            self._profiler, self._profile_at = None, None
            return
        result = analyse(self._profiler.events(), self._world, self._profile_steps)
        if not self.comm_visible:
            result = not_measured(result)
        self._profiler, self._profile_at = None, None
        self.write({"profile": result})

    def epoch(self, event: str, epoch: int) -> None:
        """The loader started (``epoch_start``) or finished (``epoch_end``) a pass: compare's wall time per epoch
        counts everything the script does between two starts — evaluation and checkpoints included."""
        self.write({event: epoch, "t": time.time()})

    def close(self, device: torch.device | None) -> None:
        if self._profiler is not None:  # the script ended inside the profiled window: no breakdown, no peak
            from paratrain.tensor_peak import without_profiler_chatter

            with without_profiler_chatter():
                self._profiler.__exit__(None, None, None)
            self._profiler, self._profile_at = None, None
        if self._file is None:
            return
        summary: dict[str, Any] = {"summary": True, "peak_rss_bytes": peak_rss_bytes(),
                                   "peak_rss_above_start_bytes": peak_rss_above_start(), "t": time.time()}
        if self._cpu_tensor_peak is not None:
            summary["cpu_tensor_peak_bytes"] = self._cpu_tensor_peak
        if device is not None and device.type == "cuda":
            import torch

            summary["cuda_max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
            # the caching allocator's high-water mark: what runs out first, beside advise's reserved figure
            summary["cuda_max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
        self.write(summary)
        self._file.close()
        self._file = None


_current: StepRecorder | None = None  # the recorder of this process's Session, when one is measuring


def _run_window() -> tuple[int, int] | None:
    """The plain run's window: on a CPU only (on a GPU, CUDA's max allocated needs none)."""
    torch = sys.modules.get("torch")
    return None if torch is not None and torch.cuda.is_available() else RUN_PEAK_WINDOW


def _profile_window() -> tuple[int | None, int]:
    text = os.environ.get(PROFILE_VAR, "")
    try:
        start, count = (int(v) for v in text.split(","))
    except ValueError:
        return None, 0
    return (start, count) if start >= 1 and count >= 1 else (None, 0)


def log(**values: Any) -> None:
    """Record named values (accuracy, perplexity, ...) beside the Session's measurements; a no-op otherwise."""
    if _current is not None:
        _current.write({"log": values})
