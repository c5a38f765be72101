"""Peak memory per rank on a CPU: the RSS high-water mark above the Session's start, reset there, so the imports
are left out and what training added is counted (paratrain.metrics)."""

from __future__ import annotations

import mmap
import sys

import pytest

from paratrain import metrics
from tests.helpers.launch import SESSION_TRAIN, check, paratrain

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the high-water mark reset is Linux's")
MIB = 2**20


def _touch(mib: int) -> mmap.mmap:
    """``mib`` MiB of new resident memory: fresh anonymous pages, each written. Not a bytearray: malloc may hand back
    memory an earlier test in this process freed and that is still resident, which the RSS would not see grow."""
    block = mmap.mmap(-1, mib * MIB)
    for offset in range(0, mib * MIB, mmap.PAGESIZE):
        block[offset] = 1
    return block


def test_the_peak_counts_what_was_allocated_after_the_start_and_not_before():
    before = _touch(96)  # held from before the start: never part of the peak
    metrics.start_peak_rss()
    held = _touch(48)
    first = metrics.peak_rss_above_start()
    held.close()
    before.close()
    metrics.start_peak_rss()
    second = metrics.peak_rss_above_start()
    assert first is not None and second is not None
    assert 48 * MIB <= first < 96 * MIB, first / MIB
    assert second < first  # the reset forgot the earlier peak
    assert metrics.peak_memory() == {"kind": "rss_above_start", "bytes": metrics.peak_rss_above_start()}


def test_the_jobs_last_line_gives_each_ranks_peak():
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", str(SESSION_TRAIN), "--steps", "5"))
    last = proc.stderr.strip().splitlines()[-1]
    assert "finished in" in last and "peak memory per rank" in last and "(RSS above the Session's start)" in last
