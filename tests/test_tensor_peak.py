"""The CPU tensors' peak (paratrain/tensor_peak.py): what Python reaches when the window opens, each storage once,
plus the highest running sum of the allocations and frees the profiler records inside it."""

from __future__ import annotations

import gc
import warnings

import torch
import torch.distributed  # its deprecated reduce_op warns when isinstance() looks at it
from torch.profiler import ProfilerActivity, profile

from paratrain.tensor_peak import live_cpu_tensor_bytes, peak_above_window_start

MIB = 1 << 20


def test_a_storage_is_counted_once_however_many_views_reach_it():
    # Earlier tests in this process may leave tensors in reference cycles; a collection between the two counts
    # would free them and move the difference (by 204 bytes, once). Collected first, and none while counting.
    gc.collect()
    gc.disable()
    try:
        before = live_cpu_tensor_bytes()
        block = torch.zeros(4 * MIB // 4)
        views = [block[:10], block.view(2, -1), block[1::2]]
        assert live_cpu_tensor_bytes() - before == 4 * MIB
        del block, views
        assert live_cpu_tensor_bytes() - before == 0
    finally:
        gc.enable()


def test_the_peak_is_the_highest_running_sum_inside_the_window():
    """8 MiB and 4 MiB alive together, then freed, then 2 MiB: the peak is 12 MiB, not the 14 MiB allocated, and
    not the 2 MiB held at the end."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        a = torch.ones(8 * MIB // 4)
        b = torch.ones(4 * MIB // 4)
        del a, b
        c = torch.ones(2 * MIB // 4)
    peak = peak_above_window_start(prof)
    assert peak is not None and 12 * MIB <= peak < 12 * MIB + MIB // 2, peak / MIB
    assert c.sum() == 2 * MIB // 4


def test_a_window_without_allocations_has_no_peak():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pass
    assert peak_above_window_start(prof) is None


def test_the_scan_prints_no_warning_into_the_users_log():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        live_cpu_tensor_bytes()
    assert [str(w.message) for w in caught] == []
