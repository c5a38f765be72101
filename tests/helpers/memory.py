"""The peak of CPU memory one training step allocates, from torch's own profiler (``profile_memory=True``): every
allocation and free is attributed to the op that made it, so the running sum of the ops' own bytes, in the order
they started, follows live memory — including what activation checkpointing recomputes during backward."""

from __future__ import annotations

from collections.abc import Callable

import torch


def step_peak_bytes(step: Callable[[], None]) -> int:
    """Peak bytes allocated above the starting point while ``step`` runs (forward and backward). Run one step before:
    gradients then already exist, so the peak is the activations' alone."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak
