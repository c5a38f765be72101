"""How much of the machine other work used while a cell ran: the measurement behind compare's "disturbed" verdict.

Why: compare runs its cells one after another on a machine it does not own. A build, a test run or a browser that
starts beside one cell slows that cell uniformly — every step, so its step-time spread looks clean — and a ratio
against it (the reference above all) is then a measurement of the other work, not of the method. The machine's busy
CPU time during the cell, minus what the cell's processes and compare itself used, is that other work, in cores.

The cell's own CPU time comes from the kernel's accounting of reaped children (``RUSAGE_CHILDREN``): every process a
cell starts is waited for by its launcher, so when the cell's ``paratrain run`` has been reaped, all of its processes
are in it. Where the platform lacks it, the load is not measured (None), never guessed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

# A cell is disturbed when other work left it less than this share of the CPU the comparison's typical cell had:
# with 2 cores and nothing else running, half a core of other work; on a machine already half busy, proportionally.
LEFT = 0.8


def disturbed(load: float | None, typical: float | None, cores: int | None) -> bool:
    """Whether other work of ``load`` cores left a cell clearly less of the machine than ``typical`` left the others.

    Why a share of what was left, not the load itself: on a machine other work already saturates, a burner beside
    one cell cannot add more than the few cores still free, yet it takes most of them from the cell."""
    if load is None or typical is None or not cores:
        return False
    return cores - load < LEFT * max(cores - typical, 0.0)


@dataclass(frozen=True)
class _Snapshot:
    wall: float
    busy: float  # CPU seconds the whole machine spent running anything since boot
    ours: float  # CPU seconds of this process and of its reaped descendants


def _snapshot() -> _Snapshot | None:
    try:
        import resource

        import psutil
    except ImportError:  # no rusage (Windows) or no psutil: not measured
        return None
    per_cpu = psutil.cpu_times(percpu=True)
    try:  # the CPUs this process (and so the cell) may run on: work elsewhere does not slow it
        mine = [per_cpu[i] for i in os.sched_getaffinity(0) if i < len(per_cpu)] or per_cpu
    except (AttributeError, OSError):
        mine = per_cpu
    # idle and waiting for I/O are not work; guest time is already counted in user time on Linux
    busy = sum(sum(t) - sum(getattr(t, name, 0.0) for name in ("idle", "iowait", "guest", "guest_nice"))
               for t in mine)
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _Snapshot(time.monotonic(), busy,
                     own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime)


class LoadMeter:
    """Started before a cell's processes, read once they are all reaped: :meth:`other_cores`."""

    def __init__(self) -> None:
        self._start = _snapshot()

    def other_cores(self) -> float | None:
        """Average number of this process's cores busy with work that was neither the cell nor compare, since the
        meter started."""
        end = _snapshot()
        if self._start is None or end is None or end.wall - self._start.wall <= 0:
            return None
        other = (end.busy - self._start.busy) - (end.ours - self._start.ours)
        return max(0.0, other / (end.wall - self._start.wall))


__all__ = ["LoadMeter", "disturbed"]
