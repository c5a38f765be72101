"""The peak of CPU memory one training step allocates, from torch's own profiler (``profile_memory=True``): every
allocation and free is attributed to the op that made it, so the running sum of the ops' own bytes, in the order
they started, follows live memory — including what activation checkpointing recomputes during backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def assert_state_is_advises(cells: list[dict[str, Any]], spec: Any, optimizer: str) -> None:
    """Each compare cell's state bytes, rank by rank, are what advise's memory model predicts for its method (fp32,
    ``optimizer``'s states), and its parameter count is the module's."""
    from paratrain.advise import memory
    from paratrain.advise.methods import get

    for cell in cells:
        ranks = len(cell["state_bytes"])
        plan = memory.Plan(ranks=ranks, optimizer=optimizer)
        predicted = [memory.rank_memory(spec, get(cell["strategy"]).sharding, plan, rank=r).state
                     for r in range(ranks)]
        assert cell["state_bytes"] == predicted, cell["key"]
        assert cell["param_count"] == spec.params
