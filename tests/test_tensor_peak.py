"""The CPU tensors' peak (paratrain/tensor_peak.py): what Python reaches when the window opens, each storage once,
plus the highest running sum of the allocations and frees the profiler records inside it."""

from __future__ import annotations

import gc
import threading
import warnings

import torch
import torch.distributed  # its deprecated reduce_op warns when isinstance() looks at it
from torch.profiler import ProfilerActivity, profile, record_function

from paratrain.tensor_peak import live_cpu_storage_pointers, live_cpu_tensor_bytes, peak_above_window_start

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


def test_a_tensor_freed_on_a_thread_the_profiler_does_not_watch_ends_as_its_siblings_do():
    """gloo's worker threads free a collective's tensors where the profiler cannot see it: here a thread of our own
    drops the last reference to a 4 MiB block. Counted until the window ends, it would sit under the later 8 MiB
    block (12 MiB); it is not alive when the window closes, so it ends as the block made at the same place before
    it did, one memory event after its allocation, and the peak is the 8 MiB block alone."""

    def make() -> torch.Tensor:
        with record_function("made_here"):
            return torch.ones(4 * MIB // 4)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        first = make()
        del first  # a free the profiler sees: how long a block made here lives
        holder = [make()]
        thread = threading.Thread(target=holder.clear)
        thread.start()
        thread.join()
        later = torch.ones(8 * MIB // 4)
        del later
        alive = live_cpu_storage_pointers()
    peak = peak_above_window_start(prof, alive)
    assert peak is not None and 8 * MIB <= peak < 8 * MIB + MIB // 2, peak / MIB


def test_a_window_without_allocations_has_no_peak():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        pass
    assert peak_above_window_start(prof) is None


def test_the_scan_prints_no_warning_into_the_users_log():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        live_cpu_tensor_bytes()
    assert [str(w.message) for w in caught] == []
