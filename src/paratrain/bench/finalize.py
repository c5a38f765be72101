"""The cross-cell columns of a comparison, filled once every cell has run (and again after an interruption): the
equivalence reference and each cell's max |Δloss| against it, scaling efficiency, PyTorch against Keras.

Apart from compare.py (which plans and runs the cells) because it is pure arithmetic over finished cells: the tests
and ``paratrain report`` apply it to results without starting anything.
"""

from __future__ import annotations

from typing import Any

from paratrain.bench import disturbance, equivalence
from paratrain.bench.results import SCHEMA_VERSION, complete

EQUIVALENCE_TOL = 1e-5
# In bf16/fp16 a split batch rounds differently (8 or 11 significant bits instead of 24): 1e-2 is a few bf16
# roundings of a loss near 1 (tests/test_options.py measures 5e-4 after 30 steps and explains the bound).
EQUIVALENCE_TOL_16BIT = 1e-2
# A Keras cell against the torch reference: the same model, data, initial weights and optimizer in another
# framework's kernels (measured on the mlp: 1.8e-6 over 120 steps).
CROSS_FRAMEWORK_TOL = 1e-4


def finalize(results: dict[str, Any]) -> None:
    """Fill the cross-cell columns: the equivalence reference, max |Δloss|, scaling efficiency."""
    cells = results["cells"]
    results["schema_version"] = SCHEMA_VERSION
    for cell in cells:
        complete(cell)  # every declared key (bench/results.py), at "not measured" where nothing was
    ok = [c for c in cells if c["status"] == "ok" and c.get("losses")]
    ref = reference_cell(ok)
    if ref is None and ok and any(c["status"] == "does_not_fit" and c["nproc"] == 1 for c in cells):
        ref = ok[0]  # one process does not fit the budget: the cells that fit are held to the first of them
    weak = results["settings"]["scaling"] == "weak"
    precision = results["settings"].get("precision") or "fp32"
    results["tolerance"] = EQUIVALENCE_TOL if precision == "fp32" else EQUIVALENCE_TOL_16BIT
    for cell in cells:
        cross = ref is not None and cell["framework"] != ref.get("framework", "torch")
        cell["tolerance"] = max(results["tolerance"], CROSS_FRAMEWORK_TOL) if cross else results["tolerance"]
    results["reference"] = ref["key"] if ref and not weak else None
    results.setdefault("floors", {})
    for cell in ok:
        if ref is not None and not weak:
            n = min(len(cell["losses"]), len(ref["losses"]))
            if n:
                cell["loss_max_abs_diff"] = max(abs(a - b) for a, b in zip(cell["losses"][:n], ref["losses"][:n],
                                                                            strict=True))
        # against one process only: a reference of several (one process did not fit) would be its own base, 50 %
        base = next((c for c in ok if c["strategy"] == cell["strategy"] and c["nproc"] == 1),
                    ref if ref is not None and ref["nproc"] == 1 else None)
        if base is not None and base.get("samples_per_s") and cell.get("samples_per_s"):
            cell["scaling_efficiency"] = cell["samples_per_s"] / (cell["nproc"] * base["samples_per_s"])
    disturbance.mark(results)
    equivalence.judge(results, ref if results["reference"] else None)
    results["cross_framework"] = _cross_framework(ok, ref if results["reference"] else None)
    results.setdefault("recommendation", None)


def reference_cell(ok: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cell every other is measured against: single×1; else a torch one-process cell (a run without single);
    else mirrored×1, TensorFlow's one process on one device (a Keras script); else any one-process cell."""
    def rank(cell: dict[str, Any]) -> int:
        if cell["strategy"] == "single":
            return 0
        if cell.get("framework", "torch") == "torch":
            return 1
        return 2 if cell["strategy"] == "mirrored" else 3

    one = [c for c in ok if c["nproc"] == 1]
    return min(one, key=rank) if one else None  # the first of the best rank: cells keep the order asked for


def _cross_framework(ok: list[dict[str, Any]], ref: dict[str, Any] | None) -> dict[str, Any] | None:
    """PyTorch against Keras: the largest loss difference of the other framework's cells from the reference."""
    if ref is None:
        return None
    theirs = ref.get("framework", "torch")
    other = [c for c in ok if c["framework"] != theirs and c.get("loss_max_abs_diff") is not None]
    if not other:
        return None
    worst = max(other, key=lambda c: c["loss_max_abs_diff"])
    return {"reference": ref["key"], "cells": [c["key"] for c in other], "worst": worst["key"],
            "max_abs_diff": worst["loss_max_abs_diff"], "steps": min(len(c["losses"]) for c in other),
            "tolerance": worst["tolerance"], "same": all(c["loss_max_abs_diff"] <= c["tolerance"] for c in other)}
