"""The report's Equivalence section: which test each cell passed or failed, and the noise floors it was held to."""

from __future__ import annotations

from typing import Any

from paratrain.bench.recommend import tolerance

WORDS = {"exact": "exact", "within_noise": "within noise", "not_equivalent": "**NOT EQUIVALENT**"}


def _floor_line(floor: dict[str, Any]) -> str:
    if floor.get("mean_abs_diff") is None:
        return f"- {floor['key']}: not measured ({floor.get('status')}: {floor.get('error') or 'no reason'})"
    return (f"- {floor['key']}: mean |Δloss| {floor['mean_abs_diff']:.1e} per step (max {floor['max_abs_diff']:.1e})"
            + (" — bit-for-bit the reference" if floor["max_abs_diff"] == 0 else ""))


def equivalence_markdown(results: dict[str, Any]) -> list[str]:
    ref = results.get("reference")
    if not ref:
        return ["No reference cell ran (or the scaling was weak: each world size trains another batch), so losses "
                "were not compared between methods."]
    tol = tolerance(results)
    factor = results.get("noise_factor", 3)
    lines = [f"Each cell's per-step loss is compared with {ref}. **Exact**: max |Δloss| ≤ {tol:.0e} at every step. "
             "Where that cannot hold — convolutions whose float sums reorder when the batch is split, dropout "
             "masks drawn per rank, BatchNorm statistics per rank — a cell is judged against noise floors measured "
             f"in this same comparison: **within noise** when its mean |Δloss| per step is at most {factor:g}× the "
             "larger floor for its number of processes (such cells can be recommended), else **NOT EQUIVALENT** "
             "(a different training; its speed does not count).", ""]
    cross = results.get("cross_framework")
    if cross:
        lines += [f"**PyTorch vs Keras**: the Keras cells ({', '.join(cross['cells'])}) train the same model, data, "
                  f"initial weights and optimizer as {cross['reference']}, in TensorFlow's kernels. "
                  "Largest difference: "
                  f"max |Δloss| {cross['max_abs_diff']:.1e} over {cross['steps']} steps ({cross['worst']}) — "
                  + (f"the same training (≤ {cross['tolerance']:.0e})." if cross["same"]
                     else f"**more than {cross['tolerance']:.0e}: the frameworks did not train alike**."), ""]
    floors = results.get("floors") or {}
    if floors:
        lines += ["Noise floors (distance of each from the reference):", "",
                  *(_floor_line(f) for f in floors.values()), ""]
    elif "floors" in results:
        lines += ["No noise floor was needed: every cell matched exactly.", ""]
    for cell in results.get("cells") or []:
        if cell["key"] == ref:
            verdict = "reference"
        elif cell.get("status") != "ok":
            verdict = f"not compared ({cell.get('status')})"
        elif cell.get("equivalence"):
            verdict = f"{WORDS[cell['equivalence']]} — {cell.get('equivalence_reason')}"
            if cell.get("equivalence_causes"):
                verdict += ". Why it is not exact: " + "; ".join(cell["equivalence_causes"])
        elif cell.get("loss_max_abs_diff") is not None:  # results written before verdicts existed
            diff = cell["loss_max_abs_diff"]
            verdict = f"max |Δloss| {diff:.1e} — {'**NOT EQUIVALENT**' if diff > tol else 'equivalent'}"
        else:
            verdict = "not compared"
        lines.append(f"- {cell['key']}: {verdict}")
    return lines
