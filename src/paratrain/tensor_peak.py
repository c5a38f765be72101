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

The profiler watches the training thread only. gloo runs a collective on a worker thread, and the work object holds
the collective's tensors (a functional all-reduce's output, its own copy of a reduce-scatter's input) until that
thread lets go of it — after the training thread did, when the worker was descheduled for a moment. Those frees
are not recorded, so a plain running sum keeps such tensors alive to the end of the window: on a tensor-parallel
llama ×2, 6-12 MiB of a 45 MiB step, different in every run and on every rank, and FSDP's and ZeRO's cells moved the
same way. :func:`peak_above_window_start` finds those tensors — their address handed out again while they were
still counted, or not alive when the window closed — and ends each where the tensors made at the same place in the
program end when their frees are seen (never past its address's next allocation). On a GPU the caching allocator
counts every thread's frees, and none of this applies.
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
# How many of the innermost ops around an allocation name its place in the program: six tell an all-reduce in
# forward (a DTensor redistribute) from one in backward (an autograd node), whose outputs live longer.
SITE_DEPTH = 6


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
    return sum(_live_cpu_storages().values())


def live_cpu_storage_pointers() -> set[int]:
    """The addresses of the CPU storages live Python objects reference: what is still alive when the window closes."""
    return set(_live_cpu_storages())


def peak_above_window_start(profiler: Any, alive_at_end: set[int] | None = None) -> int | None:
    """The highest running total of the CPU allocations and frees the profiler recorded, from where it started
    (0 when everything it saw allocated was freed first), with the frees it could not see put back (module
    docstring). ``alive_at_end``: :func:`live_cpu_storage_pointers` when the window closed; without it only a
    reused address tells that a free was missed. None when it recorded no memory events."""
    blocks = _allocations(profiler)
    if not blocks:
        return None
    open_at: dict[int, _Block] = {}
    for index, block in enumerate(blocks):  # pair each allocation with its free, or with the reuse of its address
        block.index = index
        if block.size > 0:
            missed = open_at.pop(block.ptr, None)
            if missed is not None:
                missed.reused_at = index
            open_at[block.ptr] = block
        else:
            freed = open_at.pop(block.ptr, None)
            if freed is not None:
                freed.freed_at = index
    if alive_at_end is not None:
        for ptr, block in open_at.items():
            if ptr not in alive_at_end:
                block.reused_at = len(blocks)
    # Lifetimes in the training thread's own events, not in nanoseconds: a descheduled process stretches time,
    # not the order of what it does, and the same place in the program frees its tensors after as many events.
    lifetime: dict[tuple[str, ...], int] = {}
    for block in blocks:
        if block.size > 0 and block.freed_at is not None:
            lifetime[block.site] = max(lifetime.get(block.site, 0), block.freed_at - block.index)
    changes = [(b.index, 0, b.size) for b in blocks]  # every recorded free is of a block allocated inside the window
    for block in blocks:
        if block.size > 0 and block.reused_at is not None:
            seen = lifetime.get(block.site)
            gone = block.reused_at if seen is None else min(block.reused_at, block.index + seen)
            changes.append((gone, -1, -block.size))  # before the event at that index
    running = peak = 0
    for _, _, change in sorted(changes):
        running += change
        peak = max(peak, running)
    return peak


class _Block:
    """One allocation (size > 0) or free (size < 0) the profiler recorded, with where in the program it happened."""

    __slots__ = ("freed_at", "index", "ptr", "reused_at", "site", "size", "start")

    def __init__(self, start: int, ptr: int, size: int, site: tuple[str, ...]) -> None:
        self.start, self.ptr, self.size, self.site = start, ptr, size, site
        self.index = 0  # its place among the window's memory events
        self.freed_at: int | None = None  # the index of its free, when the profiler saw it
        self.reused_at: int | None = None  # freed unseen: the index where its address was handed out again (or the end)


def _allocations(profiler: Any) -> list[_Block]:
    """The CPU memory events in time order, each with its call site: the innermost ops around it, their names
    without the module a record_function names (one block's all-gather is another block's)."""
    from torch._C._profiler import _EventType

    found: list[_Block] = []
    roots = profiler.profiler.kineto_results.experimental_event_tree()
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ()) for root in roots]
    while stack:
        node, chain = stack.pop()
        if node.typed[0] == _EventType.Allocation:
            fields = node.typed[1]
            if fields.device.type == "cpu" and fields.alloc_size:
                found.append(_Block(node.start_time_ns, fields.ptr, fields.alloc_size, chain[-SITE_DEPTH:]))
            continue
        inner = (*chain, node.name.split(" (")[0])
        stack.extend((child, inner) for child in node.children)
    found.sort(key=lambda b: (b.start, b.size > 0))  # at one instant a free comes before the allocation it allows
    return found


def _live_cpu_storages() -> dict[int, int]:
    """Address → bytes of every CPU storage live Python objects reference, each once (views share one)."""
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
    return storages
