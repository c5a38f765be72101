"""compare's memory budget (bench/budget.py): which cells are not started, and what the report and the
recommendation say about them. Planning only here (no process starts); tests/bench/test_compare_budget.py runs it."""

from __future__ import annotations

import math

import pytest

from paratrain.advise import memory, models
from paratrain.advise.methods import get
from paratrain.bench import budget, recommend, report
from paratrain.bench.compare import CompareSettings, plan_cells
from paratrain.bench.finalize import finalize
from paratrain.errors import ConfigError
from tests.helpers.requirements import requires

# The llama workload (a transformers Llama) at 3 M parameters with activation checkpointing: advise sizes one
# process at ~101 MiB and ddp×2 at ~84 MiB per rank (a whole replica each, and its gradient buckets), fsdp×2 at
# ~62 MiB (half the state, one block gathered at a time) and pp×2 at ~41 MiB (two of the four blocks per stage), so
# a 71.7 MiB budget lets only the methods that split the model start. (ZeRO-3 would not: at this size it keeps every
# gathered parameter from forward to backward, ~85 MiB, as much as ddp; measured 81.3 against 83.3 MiB.)
SIZE = {"workload": "llama", "width": 256, "depth": 4, "activation_checkpointing": True}
BUDGET_GIB = 0.07
METHODS = ["single", "ddp", "fsdp", "pp"]
pytestmark = requires("transformers")


def _cells(**extra) -> dict:
    settings = CompareSettings(strategies=METHODS, nproc=[2], **SIZE, **extra)
    return {c.key: c for c in plan_cells(settings)}


def test_cells_advise_says_cannot_fit_are_not_started_and_say_what_they_need():
    cells = _cells(memory_per_rank=BUDGET_GIB)
    for key in ("single×1", "ddp×2"):
        assert cells[key].spec is None and cells[key].status == "does_not_fit", key
        assert cells[key].reason.startswith("does not fit: needs ") and "states" in cells[key].reason
        assert f"{BUDGET_GIB:.3g} GiB budget (--memory-per-rank)" in cells[key].reason
    for key in ("fsdp×2", "pp×2"):
        assert cells[key].spec is not None, (key, cells[key].reason)
        assert cells[key].predicted["total"] <= BUDGET_GIB * budget.GIB


def test_the_prediction_is_advises_for_the_cells_own_shape():
    """The same figure `paratrain advise` computes: the module's real shapes, N ranks, the per-rank micro-batch."""
    cells = _cells()
    spec = models.from_bundled("llama", SIZE["width"], SIZE["depth"])
    plan = memory.Plan(ranks=2, micro_batch=16, seq_len=64, optimizer="adamw", checkpointing=True)
    assert cells["fsdp×2"].predicted == memory.rank_memory(spec, get("fsdp").sharding, plan).to_json()
    assert all(c.status != "does_not_fit" for c in cells.values())  # no budget on a CPU unless asked for


def test_a_budget_nothing_fits_is_one_line_before_anything_runs():
    with pytest.raises(ConfigError, match=r"no requested method fits 0\.01 GiB per rank .*single×1 needs"):
        plan_cells(CompareSettings(strategies=["single", "ddp"], nproc=[2], memory_per_rank=0.01, **SIZE))
    for bad in (0, math.inf, math.nan):  # inf once overflowed converting GiB to bytes, "a bug in paratrain"
        with pytest.raises(ConfigError, match="must be a positive number of GiB"):
            CompareSettings(memory_per_rank=bad)


def _results(over: bool = False) -> dict:
    """A finished comparison as compare assembles it: the one-process cell did not fit, two sharded cells ran."""
    gib = budget.GIB
    predicted = {"params": 1, "grads": 1, "optimizer": 2, "activations": 1, "buffers": 0, "host": 0,
                 "total": int(0.1 * gib)}
    ran = {"status": "ok", "framework": "torch", "samples_per_s": 10.0, "losses": [1.0, 0.9],
           "predicted_mem": predicted, "peak_mem_bytes": [int(0.12 * gib)] * 2, "nproc": 2}
    results = {"settings": {"scaling": "strong", "precision": "fp32"}, "memory_budget": {"bytes": int(0.18 * gib),
               "source": "--memory-per-rank"}, "cells": [
        {"key": "single×1", "strategy": "single", "nproc": 1, "framework": "torch", "status": "does_not_fit",
         "error": "does not fit: needs 0.23 GiB per rank (states 0.16 GiB), 0.18 GiB budget (--memory-per-rank)",
         "predicted_mem": {**predicted, "total": int(0.23 * gib)}},
        {"key": "fsdp×2", "strategy": "fsdp", **ran, "samples_per_s": 5.0},
        {"key": "deepspeed:zero3×2", "strategy": "deepspeed:zero3", **ran,
         "over_budget": "its measured peak, 0.2 GiB per rank, is above the 0.18 GiB budget" if over else None},
    ]}
    finalize(results)
    results["recommendation"] = recommend.recommend(results)
    return results


def test_the_sharded_cells_are_held_to_each_other_and_the_recommendation_says_why():
    results = _results()
    assert results["reference"] == "fsdp×2"  # one process does not fit: the first cell that ran is the reference
    lines = results["recommendation"]["lines"]
    assert results["recommendation"]["winner"] == "deepspeed:zero3×2"
    assert any(line.startswith("Not started, as they cannot fit 0.18 GiB per rank (--memory-per-rank): single×1 "
                               "needs 0.23 GiB") and "deepspeed:zero3×2 fits (advise predicts 0.1 GiB, it peaked "
                               "at 0.12 GiB per rank)" in line for line in lines), lines
    table = report.results_markdown(results)
    assert "| does not fit: needs 0.23 GiB per rank" in table
    section = "\n".join(budget.memory_markdown(results))
    assert "| single×1 |" in section and "does not fit: not started" in section and "| fits |" in section


def test_a_cell_above_the_budget_when_measured_is_not_recommended():
    results = _results(over=True)
    assert results["recommendation"]["winner"] == "fsdp×2"
    assert any("deepspeed:zero3×2 ran, but its measured peak" in line for line in results["recommendation"]["lines"])
    assert "ok, OVER BUDGET" in report.results_markdown(results)


def test_a_peak_that_counts_tensors_is_held_to_the_budget_and_an_rss_peak_is_shown_over_it():
    """CUDA's max allocated and a CPU's tensor peak count no more than a GPU holds: above the budget, the cell is over
    it. A CPU's RSS high-water mark counts the allocator's cached pages too: shown as over, not judged by."""
    limit = budget.Budget(100, "--memory-per-rank")
    assert budget.over({"peak_mem_bytes": [90, 120], "peak_mem_kind": "cuda"}, limit).startswith("over budget by")
    assert budget.over({"peak_mem_bytes": [90, 120], "peak_mem_kind": "cpu_tensors"}, limit).startswith("over budget")
    assert budget.over({"peak_mem_bytes": [90, 100], "peak_mem_kind": "cuda"}, limit) is None
    assert budget.over({"peak_mem_bytes": [90, 120], "peak_mem_kind": "rss_above_start"}, limit) is None
    assert budget.over_by({"peak_mem_bytes": [90, 120], "peak_mem_kind": "rss_above_start"}, limit) == 20
    assert budget.over({"peak_mem_bytes": [None], "peak_mem_kind": "cuda"}, limit) is None


def test_a_cell_measured_over_the_budget_never_reads_fits_in_table_or_plot():
    """The issue's case: a cell sized to fit that peaked above --memory-per-rank read "fits", and memory.png drew no
    budget line."""
    gib = budget.GIB
    results = _results()
    limit = budget.Budget(results["memory_budget"]["bytes"], "--memory-per-rank")
    zero3 = next(c for c in results["cells"] if c["key"] == "deepspeed:zero3×2")
    zero3.update(peak_mem_bytes=[int(0.2 * gib)] * 2, peak_mem_kind="cpu_tensors")
    zero3["over_budget"] = budget.over(zero3, limit)
    results["recommendation"] = recommend.recommend(results)
    section = "\n".join(budget.memory_markdown(results))
    row = next(line for line in section.splitlines() if line.startswith("| deepspeed:zero3×2 |"))
    assert "over budget by 0.02 GiB" in row and "fits" not in row, row
    assert "over budget by 0.02 GiB" in report.results_markdown(results)
    assert results["recommendation"]["winner"] == "fsdp×2"
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from paratrain.bench.plots import _memory_figure

    fig = _memory_figure(results)
    try:
        peaks = fig.axes[0]
        assert any("budget 0.18 GiB" in str(line.get_label()) for line in peaks.get_lines())
        assert any("over by 0.02 GiB" in t.get_text() for t in peaks.get_xticklabels())
    finally:
        plt.close(fig)


def test_no_efficiency_is_computed_against_a_cell_of_several_processes():
    """One process did not fit, so the reference is fsdp×2: it was its own base ("50 %") before."""
    results = _results()
    assert all(c.get("scaling_efficiency") is None for c in results["cells"]), [
        (c["key"], c.get("scaling_efficiency")) for c in results["cells"]]


