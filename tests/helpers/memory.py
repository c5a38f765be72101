"""The peak of CPU memory one training step allocates, counted the way compare counts it (paratrain.tensor_peak):
torch's CPU allocator reports every allocation and free to the profiler, so their running sum follows live memory
at each instant — including what activation checkpointing recomputes during backward and the temporaries an op
frees before it returns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from paratrain.tensor_peak import peak_above_window_start


def step_peak_bytes(step: Callable[[], None]) -> int:
    """Peak bytes allocated above the starting point while ``step`` runs (forward and backward). Run one step before:
    gradients then already exist, so the peak is the activations' alone."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    peak = peak_above_window_start(prof)
    assert peak is not None, "the profiler recorded no CPU memory events"
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


def _native_bf16() -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            flags = fh.read()
    except OSError:
        return True
    return "avx512_bf16" in flags or "amx_bf16" in flags


# Whether this CPU computes in bf16 natively. Without it, autocast's bf16 steps keep fp32 temporaries that advise,
# which plans for GPUs, does not count: the gpt's bf16 steps peaked 13-21 % above advise here (issue 42's note).
NATIVE_BF16 = _native_bf16()
