"""Turn the per-rank metric files of one run into the numbers of one results cell."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from paratrain.metrics import PHASES

SMOOTH_MAX = 20  # steps averaged into the final loss


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
    peak, above, cuda_peak, reserved, tensors, state, threads, logged = [], [], [], [], [], [], [], {}
    param_count = model = None
    epochs: dict[str, dict[int, float]] = {"epoch_start": {}, "epoch_end": {}}
    closed_at = None
    profiles: dict[int, dict[str, Any]] = {}
    for rank in sorted(ranks):
        rank_peak = rank_above = rank_cuda = rank_reserved = rank_tensors = rank_state = None
        for rec in ranks[rank]:
            if "step" in rec:
                steps.setdefault(rec["step"], []).append({**rec, "rank": rank})
            elif "state_bytes" in rec:
                rank_state = rec["state_bytes"]["total"]
                if "threads" in rec:
                    threads.append(rec["threads"])
                param_count = rec.get("param_count", param_count)
                model = rec.get("model", model)
            elif rec.get("summary"):
                rank_peak = rec.get("peak_rss_bytes")
                rank_above = rec.get("peak_rss_above_start_bytes")
                rank_cuda = rec.get("cuda_max_allocated_bytes")
                rank_reserved = rec.get("cuda_max_reserved_bytes")
                rank_tensors = rec.get("cpu_tensor_peak_bytes")
                closed_at = rec.get("t") if rank == 0 else closed_at
            elif rank == 0 and (event := next((k for k in epochs if k in rec), None)):
                epochs[event][rec[event]] = rec["t"]
            elif "log" in rec and rank == 0:
                logged.update(rec["log"])
            elif "profile" in rec:
                profiles[rank] = rec["profile"]
        peak.append(rank_peak)
        above.append(rank_above)
        cuda_peak.append(rank_cuda)
        reserved.append(rank_reserved)
        tensors.append(rank_tensors)
        state.append(rank_state)
    world = len(ranks)
    complete = [s for s in sorted(steps) if len(steps[s]) == world]
    losses = [sum(r["loss"] for r in steps[s]) / world for s in complete]
    measured = complete[warmup:] if len(complete) > warmup else complete
    profiled = [s for s in measured if any(r.get("profiled") for r in steps[s])]
    measured = [s for s in measured if s not in profiled]  # profiling slows steps: not in the throughput
    timed = [max(r["dt"] for r in steps[s]) for s in measured]
    timed_samples = [_samples(steps[s]) for s in measured]
    out: dict[str, Any] = {
        "steps_done": len(complete), "losses": losses, "step_times_s": timed,
        "state_bytes": state, "extra": {k: v for k, v in logged.items() if k != "final_loss"},
        "threads_per_process": max(threads) if threads else None,  # as the workers reported it
        "param_count": param_count, "model": model, **_epoch_walls(epochs, closed_at),
    }
    # On GPUs CUDA's max allocated; on a CPU the tensors' peak over the profiled steps (tensor_peak.py) where every
    # rank profiled, else the RSS high-water mark above the Session's start (the imports left out); else, as Keras
    # cells and older runs, the whole process's RSS peak.
    if any(b is not None for b in cuda_peak):
        kind, values = "cuda", cuda_peak
    else:
        kinds = (("cpu_tensors", tensors), ("rss_above_start", above))
        kind, values = next(((k, v) for k, v in kinds if v and all(b is not None for b in v)), ("rss", peak))
    out["peak_mem_bytes"], out["peak_mem_kind"] = values, kind
    if any(b is not None for b in reserved):  # GPUs: the caching allocator's peak per rank, beside the allocated
        out["peak_reserved_bytes"] = reserved
    if timed:
        median = statistics.median(timed)
        out["step_time_median_s"] = median
        out["step_time_p90_s"] = percentile(timed, 0.9)
        per_step = statistics.median(timed_samples)
        out["samples_per_s"] = per_step / median if median > 0 else None
        sps = out["samples_per_s"]
        out["tokens_per_s"] = sps * tokens_per_sample if tokens_per_sample and sps else None
    out.update(_breakdowns(steps, measured, profiled, profiles))
    first = steps.get(complete[0]) if complete else None
    if first:
        out["startup_s"] = min(r["t"] for r in first) - launch_time
    # The per-step global loss is exact (rank shares of the global mean); the script's own log is a fallback. One
    # batch's loss is noisy, so the final loss is the mean over the last tenth of the steps (1 to 20 of them).
    tail = losses[-max(1, min(SMOOTH_MAX, len(losses) // 10)):]
    out["final_loss"] = sum(tail) / len(tail) if tail else logged.get("final_loss")
    return out


def _samples(records: list[dict[str, Any]]) -> int:
    """Samples one step trained on: each replica's once, however many ranks share it (a rank that records no
    replica, as a Keras worker, is its own)."""
    per_replica: dict[Any, int] = {}
    for r in records:
        replica = r.get("replica", ("rank", r["rank"]))
        per_replica[replica] = max(per_replica.get(replica, 0), r["samples"])
    return sum(per_replica.values())


def _epoch_walls(epochs: dict[str, dict[int, float]], closed_at: float | None) -> dict[str, Any]:
    """Wall time per complete epoch on the main rank: from its start to the next epoch's start (or the end of the
    run), so the script's evaluation and checkpoints between epochs count — what an epoch really costs."""
    starts, ends = epochs["epoch_start"], epochs["epoch_end"]
    walls = []
    for epoch in sorted(ends):
        after = starts.get(epoch + 1, closed_at)
        if epoch in starts and after is not None:
            walls.append(after - starts[epoch])
    return {"epoch_wall_s": statistics.median(walls) if walls else None, "epochs_done": len(walls)}


def _rank_breakdown(steps: dict[int, list[dict[str, Any]]], measured: list[int], profiled: list[int], rank: int,
                    profile: dict[str, Any] | None) -> dict[str, Any] | None:
    """One rank's median step split into compute / exposed communication / data / optimizer / other (seconds).

    The split is measured on the profiled steps — the phases the Session timed there, and the communication the
    profiler saw — and applied, as fractions, to the cell's median unprofiled step (a step lasts as long as its
    slowest rank): the profiler slows a step, so its absolute times would not add up to the step time the
    throughput is computed from."""
    def mine(numbers: list[int]) -> list[dict[str, Any]]:
        return [r for s in numbers for r in steps[s] if r["rank"] == rank and "phases" in r]

    timed, window = mine(measured), mine(profiled) if profile else []
    basis = window or timed
    if not timed or not basis:
        return None
    step = statistics.median(max(r["dt"] for r in steps[s]) for s in measured)  # the cell's step, as timed
    # Fractions of the summed time (not medians of each phase, which need not come from the same step and could
    # add up to more than a step): the phases are disjoint parts of each step, so they never exceed the whole.
    basis_time = sum(r["dt"] for r in basis)
    if basis_time <= 0:
        return None
    med = {k: sum(r["phases"].get(k, 0.0) for r in basis) / basis_time
           for k in PHASES}
    per_step = len(basis) / basis_time  # the profile's figures are per step
    if window and not comm_measured(profile):  # the profiler could not see the method's collectives
        exposed = total = None
    else:
        # A pipeline stage waits for its peers inside a receive, which the profiler counts as communication: that
        # wait is the bubble, timed on its own (pp), and only what exceeds it is exposed communication.
        exposed_raw = profile["comm_exposed_s"] * per_step - med["bubble"] if window else 0.0
        exposed = min(max(0.0, exposed_raw), med["forward"] + med["backward"])
        total = profile["comm_total_s"] * per_step if window else 0.0
    parts = {"compute_s": med["forward"] + med["backward"] - (exposed or 0.0), "comm_exposed_s": exposed,
             "comm_total_s": total, "bubble_s": med["bubble"], "data_s": med["data"],
             "optimizer_s": med["optimizer"]}
    parts["other_s"] = max(0.0, 1.0 - sum(v or 0.0 for k, v in parts.items() if k != "comm_total_s"))
    out = {k: None if v is None else v * step for k, v in parts.items()}
    out["step_s"] = step
    return out


def comm_measured(profile: dict[str, Any]) -> bool:
    """Did the profiler see this cell's collectives? (Not Horovod's: see paratrain.breakdown.not_measured.)"""
    return profile.get("comm_measured", True) is not False and profile.get("comm_total_s") is not None


def _breakdowns(steps: dict[int, list[dict[str, Any]]], measured: list[int], profiled: list[int],
                profiles: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Rank 0's breakdown and the slowest rank's (the one with the most compute + data: the others wait for it)."""
    ranks = sorted({r["rank"] for s in measured for r in steps[s]})
    per_rank = {rank: _rank_breakdown(steps, measured, profiled, rank, profiles.get(rank)) for rank in ranks}
    per_rank = {k: v for k, v in per_rank.items() if v}
    out: dict[str, Any] = {"breakdown": None, "breakdown_slowest": None, "comm_bytes_per_step": None,
                           "bus_gbps": None, "comm_share": None}
    if 0 not in per_rank:
        return out
    base = per_rank[0]
    slowest = max(per_rank, key=lambda r: per_rank[r]["compute_s"] + per_rank[r]["data_s"])
    out["breakdown"] = base
    out["breakdown_slowest"] = {"rank": slowest, **per_rank[slowest]}
    profile = profiles.get(0)
    if profile is not None and not comm_measured(profile):
        out["comm_measured"] = False  # Horovod's collectives: None below means "not measured", not "none"
    elif profile is not None:
        out["comm_bytes_per_step"] = profile["comm_bytes_per_step"]
        out["collectives_per_step"] = profile.get("collectives_per_step")
        out["comm_bytes_by_kind"] = profile.get("comm_bytes_by_kind")
        total = base["comm_total_s"]  # at unprofiled speed
        sent = profile["comm_bytes_per_step"]
        out["bus_gbps"] = sent / total / 1e9 if total > 0 and sent > 0 else None
        out["comm_share"] = base["comm_exposed_s"] / base["step_s"] if base["step_s"] > 0 else None
    return out
