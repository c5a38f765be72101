"""How many CPU threads each worker process gets.

torchrun sets ``OMP_NUM_THREADS=1`` for every multi-process launch, and so did paratrain for every launch: a single
process then used one core of a machine that has several, and ``compare`` gave one process half the machine while
two processes got all of it — biased against the baseline users come to measure. The policy here gives a job the
cores it may use, split between the processes of this node:

- ``--threads N`` (or ``threads = N`` in paratrain.toml): N per process, as asked.
- ``OMP_NUM_THREADS`` already in the environment: the user's value, unchanged.
- GPU machines, several processes: 1, torchrun's conservative default (the CPU only feeds the GPUs there).
- otherwise: the cores available to this job (CPU affinity and the cgroup CPU quota, not just ``os.cpu_count()``)
  divided by the processes per node, at least 1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> int | None:
    """Whole CPUs allowed by a cgroup CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 and period_us > 0 else None


def available_cores(root: Path = CGROUP_ROOT) -> int:
    """The CPUs this process may run on: its affinity mask, capped by a cgroup quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    return max(1, min(cores, limit) if limit else cores)


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # per process
    reason: str  # where the number came from, as the user would say it
    cores: int  # cores available to this job on this node
    from_environment: bool = False  # the user's OMP_NUM_THREADS: passed on untouched, torch reads it as usual


def choose_threads(nproc: int, *, gpus: int = 0, requested: int | None = None,
                   environ: Mapping[str, str] | None = None) -> ThreadChoice:
    """Threads per process for ``nproc`` processes on this node."""
    env = os.environ if environ is None else environ
    cores = available_cores()
    if requested is not None:
        return ThreadChoice(requested, "--threads", cores)
    user = env.get("OMP_NUM_THREADS", "").strip()
    if user.isdigit() and int(user) > 0:
        return ThreadChoice(int(user), "OMP_NUM_THREADS from the environment", cores, from_environment=True)
    if gpus and nproc > 1:
        return ThreadChoice(1, "torchrun's default on GPU machines", cores)
    return ThreadChoice(max(1, cores // max(1, nproc)), f"{cores} cores / {nproc} process(es)", cores)


def oversubscribed(nproc: int, threads: int, cores: int) -> bool:
    """More threads (or processes) on this node than cores: they take turns, and timings say so."""
    return nproc * threads > cores
