"""Which cells of a comparison were measured while other work disturbed them, which to measure again, and which of
a cell's runs to keep.

Why: compare's ratios hold only if every cell had the same machine. Two signs say a cell did not:
- **the load**: other work used more of the machine during the cell than during the comparison's typical cell
  (:mod:`paratrain.bench.load` measures it; the typical cell is the median, so a machine that is busy throughout
  disturbs no cell more than another — the report says the machine was busy instead);
- **its peers**: one-process cells of every torch method run the same computation (one model, one batch, nothing to
  communicate), so one of them far slower than the others was slowed by something else, even when the load did not
  show it.
A suspect cell is run once more after the others (what disturbed it has usually passed), the run with the least
other work beside it is kept, and a cell still disturbed is flagged: the recommendation never rests on it.
"""

from __future__ import annotations

import statistics
from typing import Any

from paratrain.bench import load as load_

SLOW_PEER = 0.5  # a one-process cell below this share of its peers' median throughput is suspect
MIN_PEERS = 3  # a median of fewer one-process cells says nothing about which one is off


def typical_load(runs: list[dict[str, Any]]) -> float | None:
    """The median other work, in cores, over the runs that finished and measured it."""
    loads = [r["other_load"] for r in runs if r.get("status") == "ok" and r.get("other_load") is not None]
    return statistics.median(loads) if loads else None


def is_disturbed(run: dict[str, Any], typical: float | None, cores: int | None) -> bool:
    """Other work left ``run`` clearly less of the machine than the typical cell had (bench/load.py)."""
    return load_.disturbed(run.get("other_load"), typical, cores)


def _slow_peers(rows: list[dict[str, Any]]) -> list[str]:
    """One-process torch cells far slower than the median of all of them."""
    peers = [r for r in rows if r.get("status") == "ok" and r.get("nproc") == 1 and r.get("samples_per_s")
             and r.get("framework", "torch") == "torch"]
    if len(peers) < MIN_PEERS:
        return []
    median = statistics.median(r["samples_per_s"] for r in peers)
    return [r["key"] for r in peers if r["samples_per_s"] < SLOW_PEER * median]


def suspects(rows: list[dict[str, Any]], cores: int | None) -> list[str]:
    """Keys of the cells to measure again: disturbed by the load, or far slower than their one-process peers."""
    typical = typical_load(rows)
    loaded = [r["key"] for r in rows if r.get("status") == "ok" and is_disturbed(r, typical, cores)]
    slow = set(_slow_peers(rows))
    return [r["key"] for r in rows if r["key"] in slow or r["key"] in loaded]


def median_run(runs: list[dict[str, Any]], typical: float | None = None, cores: int | None = None,
               suspect: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run a cell reports: the median throughput of its finished runs, leaving out those other work disturbed
    (unless every one was); its repeats and their spread for ties. A ``suspect`` run that was measured again is not
    part of that spread unless it is the run kept: how far a disturbed run fell says nothing of run-to-run noise."""
    ok = [r for r in runs if r["status"] == "ok"]
    if not ok:
        return runs[-1]
    quiet = [r for r in ok if not is_disturbed(r, typical, cores)] or ok
    quiet.sort(key=lambda r: r.get("samples_per_s") or 0.0)
    kept = quiet[len(quiet) // 2]
    chosen = dict(kept)
    chosen["repeats"] = len(runs)
    chosen["repeat_samples_per_s"] = [r.get("samples_per_s") for r in quiet if r is kept or r is not suspect]
    return chosen


def remeasured(first: dict[str, Any], kept: dict[str, Any], cores: int | None) -> str:
    """Why a cell was run again and what that gave, for the report."""
    load = first.get("other_load")
    beside = (f", {load:.1f} of {cores} cores busy with other work" if load is not None and cores
              else f", {load:.1f} cores busy with other work" if load is not None else "")
    speed = first.get("samples_per_s")
    was = f"{speed:,.0f} samples/s{beside}" if speed else f"no throughput{beside}"
    now = kept.get("samples_per_s")
    return f"measured again: the first run gave {was}; the run kept gave {now:,.0f}" if now else (
        f"measured again: the first run gave {was}")


def mark(results: dict[str, Any]) -> None:
    """Store the comparison's typical other work (``other_load``) and each cell's ``disturbed`` reason (None when
    it had the machine the others had)."""
    cells = results.get("cells") or []
    cores = (results.get("env") or {}).get("cores")
    typical = typical_load(cells)
    results["other_load"] = typical
    for cell in cells:
        hit = cell.get("status") == "ok" and is_disturbed(cell, typical, cores)
        cell["disturbed"] = _reason(cell["other_load"], typical, cores) if hit else None


def _reason(load: float, typical: float, cores: int) -> str:
    left, usual = max(cores - load, 0.0), max(cores - typical, 0.0)
    less = f", {1 - left / usual:.0%} less than" if usual else ", as little as"
    return (f"other work used {load:.1f} of {cores} cores while it ran, leaving it {left:.1f}{less} the "
            f"{usual:.1f} the comparison's typical cell had")


def busy_machine_line(results: dict[str, Any]) -> str | None:
    """Said once when other work was heavy throughout: every figure is low, the ratios between them less so."""
    typical = results.get("other_load")
    cores = (results.get("env") or {}).get("cores")
    if typical is None or not load_.disturbed(typical, 0.0, cores):
        return None
    return (f"Other work used {typical:.1f} of {cores} cores during the typical cell: every speed here is below what "
            "a quiet machine gives (the ratios between cells are steadier than the speeds); rerun on a quiet machine "
            "for absolute figures.")


__all__ = ["busy_machine_line", "mark", "median_run", "remeasured", "suspects", "typical_load"]
