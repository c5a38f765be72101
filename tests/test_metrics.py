"""Peak memory per rank on a CPU (paratrain.metrics): the RSS high-water mark above the Session's start, reset there,
so the imports are left out and what training added is counted; and the job's last line, which reports the tensors'
peak compare reports, with that RSS beside it."""

from __future__ import annotations

import json
import mmap
import re
import sys

import pytest

from paratrain import metrics
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain, worker_env

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
    assert "finished in" in last and "peak tensor memory per rank" in last and "steps 2–3, compare's figure" in last
    assert "process RSS above the Session's start, framework and allocator included: " in last, last
    assert "USDT" not in proc.stderr and "profiler_start" not in proc.stderr  # the profiler's engine says nothing
    short = check(paratrain("run", "-s", "ddp", "-n", "2", str(SESSION_TRAIN), "--steps", "2"))
    last = short.stderr.strip().splitlines()[-1]  # too short for the profiled steps: the RSS, named as such
    assert "peak memory per rank" in last and "(process RSS above the Session's start" in last, last


TRAIN = str(ROOT / "src" / "paratrain" / "workloads" / "train.py")
# A gpt whose AdamW state (25 M parameters: about 400 MiB with gradients) dominates a batch of 2: FSDP halves it on
# each rank, while each rank's RSS (torch, gloo's threads, the allocator's heap) is as large as one process's or more.
STATE_BOUND = ["--workload", "gpt", "--width", "512", "--depth", "8", "--batch-size", "2", "--steps", "4"]
UNITS = {"KiB": 2**10, "MiB": 2**20}


def _peak(proc) -> float:
    """The busiest rank's figure on the job's last line, in bytes."""
    last = proc.stderr.strip().splitlines()[-1]
    found = re.search(r"peak (?:tensor )?memory per rank ([\d.]+)(?:–([\d.]+))? (KiB|MiB)", last)
    assert found, last
    return float(found.group(2) or found.group(1)) * UNITS[found.group(3)]


@pytest.mark.multiprocess
def test_the_run_line_ranks_fsdp_below_single_as_compares_tensor_peaks_do():
    single = _peak(check(paratrain("run", "-s", "single", TRAIN, *STATE_BOUND, timeout=300)))
    fsdp = _peak(check(paratrain("run", "-s", "fsdp", "-n", "2", TRAIN, *STATE_BOUND, timeout=300)))
    assert fsdp < 0.85 * single, (fsdp / 2**20, single / 2**20)


@pytest.mark.multiprocess
def test_the_run_lines_figure_is_the_one_compare_records(tmp_path):
    """Under compare's variables (its rank files, its profiled steps) the same run's line and records agree."""
    env = worker_env(PARATRAIN_METRICS=str(tmp_path), PARATRAIN_PROFILE="1,2")
    line = _peak(check(paratrain("run", "-s", "fsdp", "-n", "2", TRAIN, *STATE_BOUND, env=env, timeout=300)))
    summaries = [json.loads(text) for file in sorted(tmp_path.glob("rank*.jsonl"))
                 for text in file.read_text().splitlines() if '"summary"' in text]
    recorded = max(s["cpu_tensor_peak_bytes"] for s in summaries)
    assert len(summaries) == 2 and abs(line - recorded) <= 0.5 * 2**20, (line, recorded)
