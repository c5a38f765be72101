"""Turn the per-rank metric files of one run into the numbers of one results cell."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


def read_rank_files(folder: Path) -> dict[int, list[dict[str, Any]]]:
    ranks: dict[int, list[dict[str, Any]]] = {}
    for file in sorted(folder.glob("rank*.jsonl")):
        rank = int(file.stem[len("rank"):])
        records = []
        for line in file.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash
        ranks[rank] = records
    return ranks


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summarize(folder: Path, *, warmup: int, launch_time: float, tokens_per_sample: int | None) -> dict[str, Any]:
    """Aggregate over ranks: a step takes as long as its slowest rank; the global loss is the mean of rank shares."""
    ranks = read_rank_files(folder)
    steps: dict[int, list[dict[str, Any]]] = {}
    peak, cuda_peak, state, threads, logged = [], [], [], [], {}
    param_count = None
    for rank in sorted(ranks):
        rank_peak = rank_cuda = rank_state = None
        for rec in ranks[rank]:
            if "step" in rec:
                steps.setdefault(rec["step"], []).append(rec)
            elif "state_bytes" in rec:
                rank_state = rec["state_bytes"]["total"]
                if "threads" in rec:
                    threads.append(rec["threads"])
                param_count = rec.get("param_count", param_count)
            elif rec.get("summary"):
                rank_peak = rec.get("peak_rss_bytes")
                rank_cuda = rec.get("cuda_max_allocated_bytes")
            elif "log" in rec and rank == 0:
                logged.update(rec["log"])
        peak.append(rank_peak)
        cuda_peak.append(rank_cuda)
        state.append(rank_state)
    world = len(ranks)
    complete = [s for s in sorted(steps) if len(steps[s]) == world]
    losses = [sum(r["loss"] for r in steps[s]) / world for s in complete]
    dts = [max(r["dt"] for r in steps[s]) for s in complete]
    samples = [sum(r["samples"] for r in steps[s]) for s in complete]
    timed = dts[warmup:] if len(dts) > warmup else dts
    timed_samples = samples[warmup:] if len(samples) > warmup else samples
    out: dict[str, Any] = {
        "steps_done": len(complete), "losses": losses, "step_times_s": timed,
        "state_bytes": state, "extra": {k: v for k, v in logged.items() if k != "final_loss"},
        "threads_per_process": max(threads) if threads else None,  # as the workers reported it
        "param_count": param_count,
    }
    use_cuda = any(v is not None for v in cuda_peak)
    out["peak_mem_bytes"] = cuda_peak if use_cuda else peak
    out["peak_mem_kind"] = "cuda" if use_cuda else "rss"
    if timed:
        median = statistics.median(timed)
        out["step_time_median_s"] = median
        out["step_time_p90_s"] = percentile(timed, 0.9)
        per_step = statistics.median(timed_samples)
        out["samples_per_s"] = per_step / median if median > 0 else None
        sps = out["samples_per_s"]
        out["tokens_per_s"] = sps * tokens_per_sample if tokens_per_sample and sps else None
    first = steps.get(complete[0]) if complete else None
    if first:
        out["startup_s"] = min(r["t"] for r in first) - launch_time
    # The per-step global loss is exact (rank shares of the global mean); the script's own log is a fallback.
    out["final_loss"] = losses[-1] if losses else logged.get("final_loss")
    return out
