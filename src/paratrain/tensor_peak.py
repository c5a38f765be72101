"""The CPU's counterpart of CUDA's max allocated: the peak bytes of CPU tensors over the profiled steps.

Why: a CPU process's RSS high-water mark is not what advise predicts. glibc keeps freed activation memory in its
heap, fragmented, so the RSS of a training loop climbs for several steps past what its tensors ever held (a 24 M
parameter llama: 1.53 GiB of RSS for 0.92 GiB of tensors, which advise puts at 0.92 GiB), and modules imported
after the Session starts count too. CUDA's caching allocator reports the bytes its tensors hold instead, and that is
what advise models and a budget can be held to.

torch's CPU allocator reports every allocation and free to the profiler when it profiles memory, so over the steps
``compare`` already profiles (for its time breakdown) the running sum of those events is exact. The bytes alive
when the window opens are counted from the tensors Python can reach — the parameters, optimizer state,
the engine's flat buffers (DeepSpeed keeps its partitions as tensor attributes) — each storage once. Tensors only
C++ holds are not seen that way: a method that keeps some says how many bytes (Strategy.unseen_cpu_bytes:
DistributedDataParallel's gradient buckets, from DDP's own report). Horovod's fusion buffer is still left out, so
a Horovod cell's peak is low by its size; the report's footnote says so.

The window opens after a step's gradients are freed: the profiler cannot see the free of a tensor allocated before
it started (torch warns "Memory block of unknown size was allocated before the profiling started" in the cell's
log), so tensors freed inside the window must not be alive when it opens.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from typing import Any

# What Kineto (the profiler's engine) prints to the process's stderr, from C++, each time a profiler starts and stops
# ("USDT:… profiler_start"), whatever its log level: two lines per rank that no user asked for.
KINETO_CHATTER = (b"USDT:", b"STAGE:")
# And its warning when the script's own profiler ran inside this window and ended it: the peak is then not reported.
DISRUPTED = b"disableProfiler called but no active profiling session"


def profiler_in_use() -> bool:
    """Is a profiler running already (the script's own)? A second one would take its events away."""
    import torch

    return bool(torch.autograd._profiler_enabled())


def without_profiler_chatter() -> contextlib.AbstractContextManager[None]:
    """Start or stop a profiler without Kineto's lines; everything else written to stderr meanwhile is passed on."""
    from paratrain.console import stderr_without

    return stderr_without(lambda line: line.startswith(KINETO_CHATTER) or DISRUPTED in line)


def live_cpu_tensor_bytes() -> int:
    """Bytes of the CPU storages that live Python objects reference, each storage counted once (views share)."""
    import torch

    storages: dict[int, int] = {}
    with warnings.catch_warnings():  # isinstance() on some deprecated torch objects warns (dist.reduce_op)
        warnings.simplefilter("ignore")
        tensors = [obj for obj in gc.get_objects() if isinstance(obj, torch.Tensor)]
    for obj in tensors:
        try:
            if obj.device.type != "cpu" or obj.is_meta:
                continue
            storage = obj.untyped_storage()
            if storage.nbytes():  # a freed storage (an FSDP unit's resharded parameters) has no data pointer
                storages[storage.data_ptr()] = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # wrapper subclasses (a DTensor) hold no storage themselves
            continue
    return sum(storages.values())


def peak_above_window_start(profiler: Any) -> int | None:
    """The highest running total of the CPU allocations and frees the profiler recorded, from where it started
    (0 when everything it saw allocated was freed first). None when it recorded no memory events."""
    from torch.autograd import DeviceType

    events = [e for e in profiler.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == DeviceType.CPU]
    if not events:
        return None
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()
        peak = max(peak, running)
    return peak
