"""A realistic ``paratrain compare`` results dict, built without training anything.

Why synthetic: the report, plots, history and CLI only consume this dict, so testing them against a fixed, known
dict is fast and lets every assertion name exact numbers (1900 samples/s is 1.9× the 1000 of single×1, etc.).
Cells: single×1 (the reference), ddp×1, ddp×2 (fastest, equivalent: the winner), fsdp×2 (less state per rank
but a 3e-3 loss difference, so it must be flagged), deepspeed×2 (failed) and horovod×2 (unavailable).
:func:`noisy_base_results` adds the issue's noisy one-process base; :func:`many_cells_results` has 16 finished
cells, for plots that must stay readable.
"""

from __future__ import annotations

import copy
import math
import random
from typing import Any

MIB = 1 << 20
STEPS, WARMUP, BATCH = 150, 10, 64


def _losses(offset: float = 0.0, wobble: float = 0.0) -> list[float]:
    return [2.3 * math.exp(-t / 40) + 0.1 + offset * (t > 75) + wobble * math.sin(t) for t in range(STEPS)]


def _steps(median_s: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median_s * (1 + 0.1 * rng.gauss(0, 1) ** 2) for _ in range(STEPS - WARMUP)]


def _cell(key: str, strategy: str, nproc: int, sps: float, state_mib: float, peak_mib: float, seed: int,
          diff: float | None, losses: list[float], **extra: Any) -> dict[str, Any]:
    step = BATCH / sps
    return {
        "key": key, "strategy": strategy, "nproc": nproc, "status": "ok",
        "samples_per_s": sps, "tokens_per_s": None, "step_time_median_s": step, "step_time_p90_s": step * 1.12,
        "step_times_s": _steps(step, seed), "startup_s": 1.2 + 0.8 * (nproc - 1), "wall_s": 8.0 + nproc,
        "peak_mem_bytes": [int((peak_mib + 3 * r) * MIB) for r in range(nproc)], "peak_mem_kind": "rss",
        "state_bytes": [int(state_mib * MIB)] * nproc,
        "comm_share": None if nproc == 1 else 0.12, "scaling_efficiency": sps / (nproc * 1000.0),
        "final_loss": losses[-1], "loss_max_abs_diff": diff, "losses": losses,
        "extra": {"accuracy": 0.95}, "error": None, "log": f"runs/compare-20261202-154000/logs/{key}.log",
        **extra,
    }


def _broken(key: str, strategy: str, status: str, error: str) -> dict[str, Any]:
    return {
        "key": key, "strategy": strategy, "nproc": 2, "status": status, "samples_per_s": None,
        "tokens_per_s": None, "step_time_median_s": None, "step_time_p90_s": None, "step_times_s": [],
        "startup_s": None, "wall_s": None, "peak_mem_bytes": [], "peak_mem_kind": "rss", "state_bytes": [],
        "comm_share": None, "scaling_efficiency": None, "final_loss": None, "loss_max_abs_diff": None,
        "losses": [], "extra": {}, "error": error,
        "log": f"runs/compare-20261202-154000/logs/{key}.log" if status == "failed" else None,
    }


def sample_results(cell_changes: dict[str, dict[str, Any]] | None = None, **overrides: Any) -> dict[str, Any]:
    """A fresh copy; ``overrides`` replace top-level keys, ``cell_changes={"fsdp×2": {...}}`` patch one cell."""
    base = _losses()
    results: dict[str, Any] = {
        "id": "compare-20261202-154000",
        "created": "2026-12-02T15:40:00+00:00",
        "paratrain": "0.1.0",
        "settings": {"workload": "mlp", "script": None, "script_args": [],
                     "strategies": ["single", "ddp", "fsdp", "deepspeed:zero=2", "horovod"], "nproc": [1, 2],
                     "steps": STEPS, "warmup": WARMUP, "repeat": 1, "scaling": "strong", "global_batch": BATCH,
                     "tokens_per_sample": None},
        "env": {"python": "3.11.7", "torch": "2.13.0+cpu", "platform": "Linux-6.8.0-x86_64-with-glibc2.39",
                "hostname": "bench-box",
                "inventory": {"source": "none", "reason": "NVML Shared Library Not Found", "driver": None,
                              "cuda": None, "gpus": [],
                              "cpu": {"cores": 16, "logical_cores": 32, "memory_gib": 125.7},
                              "visible": [], "topology": None}},
        "reference": "single×1",
        "cells": [
            _cell("single×1", "single", 1, 1000.0, 1.5, 300.0, 1, 0.0, base),
            _cell("ddp×1", "ddp", 1, 980.0, 1.5, 310.0, 2, 0.0, base),
            _cell("ddp×2", "ddp", 2, 1900.0, 1.5, 320.0, 3, 2e-7, _losses(wobble=2e-7)),
            _cell("fsdp×2", "fsdp", 2, 1520.0, 0.825, 290.0, 4, 3e-3, _losses(offset=3e-3)),
            _broken("deepspeed:zero=2×2", "deepspeed:zero=2", "failed",
                    "worker 1 exited with code 1: RuntimeError: expected all tensors to be on the same device"),
            _broken("horovod×2", "horovod", "unavailable",
                    'horovod is not installed: pip install "paratrain[horovod]"'),
        ],
        "recommendation": None,
    }
    results.update(copy.deepcopy(overrides))
    for cell in results["cells"]:
        cell.update(copy.deepcopy((cell_changes or {}).get(cell["key"], {})))
    return results


def noisy_base_results() -> dict[str, Any]:
    """The reported case: fsdp×1 ran on a busy machine (p90 step 4× its median), so it measured slow and fsdp×2's
    efficiency against it came out at 313 %; fsdp×2 is equivalent here and the fastest, so it wins."""
    results = sample_results({"fsdp×2": {"samples_per_s": 2000.0, "loss_max_abs_diff": 1e-7, "losses": _losses(),
                                         "scaling_efficiency": 2000.0 / (2 * 320.0)}})
    base = _cell("fsdp×1", "fsdp", 1, 320.0, 1.5, 300.0, 5, 0.0, _losses())
    base.update(step_time_p90_s=base["step_time_median_s"] * 4.0, scaling_efficiency=1.0)
    results["cells"].insert(4, base)
    return results


MANY = (("single", 1), ("ddp", 1), ("ddp", 2), ("ddp", 4), ("fsdp", 1), ("fsdp", 2), ("fsdp", 4),
        ("deepspeed:zero1", 1), ("deepspeed:zero1", 2), ("deepspeed:zero2", 2), ("deepspeed:zero3", 2),
        ("deepspeed:zero3", 4), ("horovod", 2), ("multiworker", 2), ("mirrored", 2), ("dp", 2))


def _breakdown(step_s: float, comm: float) -> dict[str, float]:
    """A plausible split of one step: ``comm`` of it waiting on collectives, the rest mostly compute."""
    rest = step_s * (1 - comm)
    return {"compute_s": 0.7 * rest, "comm_exposed_s": step_s * comm, "comm_total_s": step_s * comm,
            "data_s": 0.1 * rest, "optimizer_s": 0.15 * rest, "other_s": 0.05 * rest, "step_s": step_s}


def many_cells_results() -> dict[str, Any]:
    """Sixteen finished cells, every method at 1, 2 and 4 processes as a wide ``--strategies`` gives, with long keys
    (deepspeed:zero1×2), four-digit values and per-rank memory: what crowds a plot's labels."""
    cells, one = [], {}  # one: each method's one-process throughput, the base of its scaling efficiency
    for i, (strategy, n) in enumerate(MANY):
        sharded = strategy in ("fsdp", "deepspeed:zero3")
        base = one.get(strategy, one.get("single")) if n > 1 else 600.0 * (1.0 + 0.04 * i)
        sps = base * n * (1.0 - 0.1 * (n - 1) - 0.005 * i * (n > 1))
        if n == 1:
            one[strategy] = sps
        cell = _cell(f"{strategy}×{n}", strategy, n, sps, 12.5 / n if sharded else 12.5, 800.0 + 97.0 * i, i,
                     0.0 if n == 1 else 1e-7, _losses())
        cell["scaling_efficiency"] = sps / (n * (base if n > 1 else sps))  # as bench/finalize.py computes it
        cell["breakdown"] = _breakdown(cell["step_time_median_s"], 0.0 if n == 1 else 0.1 + 0.02 * i)
        cells.append(cell)
    return sample_results(cells=cells, settings={**sample_results()["settings"], "strategies": list(dict.fromkeys(
        s for s, _ in MANY)), "nproc": [1, 2, 4]})
