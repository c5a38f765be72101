"""Does a cell train the same model as the reference? Exactly where float order allows it, else against noise.

Why two tests. On an MLP every method matches one process to ~1e-7, and the exact test (max |Δloss| ≤ 1e-5 over
the whole curve) catches any real difference. On the models people train it cannot hold: splitting a batch across
ranks reorders the float sums inside convolutions and training amplifies the difference (a CNN's ddp×2 crosses 1e-5
at step 12 — and so does plain PyTorch with the batch split in two), each rank draws its own dropout masks, and
without SyncBatchNorm each rank normalises its own slice. So a cell that fails the exact test is judged against
noise floors *measured in the same comparison*:

- ``float_order`` (per world size N): the reference method in one process with each global batch split into N
  micro-batches (``PARATRAIN_ACCUM_SPLIT=N``, which multiplies a script's own ``grad_accum``) — the arithmetic of
  N ranks, in another summation order (and, with BatchNorm, the same per-slice statistics as N ranks without
  SyncBatchNorm).
- ``seed``: the reference again with its RNGs reseeded after ``prepare()`` (``PARATRAIN_RESEED``) — other dropout
  masks, the same initial weights and data order. Zero for a model without randomness.

The statistic is the mean |Δloss| per step against the reference (the max is one noisy step: on a dropout MLP it does
not separate a correct ddp×2 from a broken one, the mean does). A cell is ``within_noise`` when that mean is at most
:data:`NOISE_FACTOR` × the larger floor for its world size, else ``not_equivalent``. Measured on the cases that
motivated it (dropout MLP, 100 steps): seed floor 0.021, ddp×2 0.022, a broken ddp×2 0.082 — 3.9× the floor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from paratrain.bench.runner import CellSpec
from paratrain.run_hooks import RunHooks

NOISE_FACTOR = 3.0
RESEED = 1  # the seed of the seed floor (the workloads seed their weights with 0 before the Session starts)
Verdict = str  # "exact" | "within_noise" | "not_equivalent"


@dataclass(frozen=True)
class Floor:
    kind: str  # "float_order" | "seed"
    split: int  # micro-batches per global batch (float_order); 1 for the seed floor

    @property
    def key(self) -> str:
        return f"floor: one process, batch split in {self.split}" if self.kind == "float_order" \
            else "floor: reference, another RNG seed"

    @property
    def name(self) -> str:
        """Its key in results.json's ``floors``."""
        return self.kind if self.kind == "seed" else f"{self.kind}-{self.split}"

    def spec(self, reference: CellSpec) -> CellSpec:
        """The reference's run, changed only where the floor says."""
        if self.kind == "float_order":
            return replace(reference, env={**reference.env, **RunHooks(accum_split=self.split).to_env()})
        return replace(reference, env={**reference.env, **RunHooks(reseed=RESEED).to_env()})


def mean_abs_diff(a: list[float], b: list[float]) -> float | None:
    n = min(len(a), len(b))
    return sum(abs(x - y) for x, y in zip(a[:n], b[:n], strict=True)) / n if n else None


def max_abs_diff(a: list[float], b: list[float]) -> float | None:
    n = min(len(a), len(b))
    return max(abs(x - y) for x, y in zip(a[:n], b[:n], strict=True)) if n else None


def _judged(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in results["cells"] if c["status"] == "ok" and c.get("loss_max_abs_diff") is not None]


def floors_needed(results: dict[str, Any]) -> list[Floor]:
    """The floors a verdict needs: none when every cell is exact (the MLP case costs nothing extra)."""
    ref, tol = results.get("reference"), results["tolerance"]
    inexact = [c for c in _judged(results) if c["key"] != ref and c["loss_max_abs_diff"] > tol]
    if not inexact:
        return []
    splits = sorted({c["nproc"] for c in inexact if c["nproc"] > 1})
    return [*(Floor("float_order", n) for n in splits), Floor("seed", 1)]


def floor_entry(floor: Floor, run: dict[str, Any], ref_losses: list[float]) -> dict[str, Any]:
    """What results.json keeps of a floor run: its distance from the reference, or why it failed."""
    entry = {"key": floor.key, "kind": floor.kind, "split": floor.split, "status": run["status"],
             "error": run.get("error"), "log": run.get("log"), "losses": run.get("losses") or []}
    entry["mean_abs_diff"] = mean_abs_diff(entry["losses"], ref_losses) if run["status"] == "ok" else None
    entry["max_abs_diff"] = max_abs_diff(entry["losses"], ref_losses) if run["status"] == "ok" else None
    return entry


def _floor_for(results: dict[str, Any], nproc: int) -> tuple[float | None, list[str]]:
    """The noise floor for a world size (the larger measured floor) and the keys of the floors it came from."""
    floors = results.get("floors") or {}
    found = [f for f in floors.values() if f.get("mean_abs_diff") is not None
             and (f["kind"] == "seed" or f["split"] == nproc)]
    if not found:
        return None, []
    return max(f["mean_abs_diff"] for f in found), [f["kind"] for f in found]


def replicas(spec: str, nproc: int) -> int:
    """How many data-parallel replicas a cell's ranks form — the ways its batch is split: one for tp and pp (the
    ranks hold parts of one model and read the same batch), the groups of tp ranks for fsdp+tp, every rank else."""
    from paratrain.strategies.base import parse_spec

    name, options = parse_spec(spec)
    if name in ("tp", "pp"):
        return 1
    if name == "fsdp+tp":
        tp = int(options["tp"]) if options.get("tp", "").isdigit() else (2 if nproc % 2 == 0 else 1)
        return max(1, nproc // tp)
    return nproc


# What a method that splits the model itself adds up in another order than one process does
_SPLIT_ORDER = {"tp": "tensor parallel adds each split layer's partial sums in another order",
                "fsdp+tp": "tensor parallel adds each split layer's partial sums in another order",
                "pp": "the pipeline adds its micro-batches' gradients in another order"}


def causes(facts: dict[str, Any] | None, nproc: int, spec: str = "") -> list[str]:
    """Why a cell may differ from one process by more than rounding, from what the run reported of its model and
    what its method does: a reason that does not apply to the method (a batch split, for tp) is never given."""
    facts = facts or {}
    split = replicas(spec, nproc) if spec else nproc
    out = []
    if facts.get("dropout"):
        out.append(f"model uses {', '.join(facts['dropout'])}: each rank draws its own masks")
    if split > 1 and facts.get("batchnorm"):
        out.append(f"{', '.join(facts['batchnorm'])} normalise each rank's slice of the batch (no SyncBatchNorm: "
                   "it needs GPUs)")
    if split > 1:
        out.append(f"{'convolutions reorder' if facts.get('conv') else 'the batch split reorders'} float sums across "
                   f"{split} {'ranks' if split == nproc else 'replicas'}")
    method = spec.partition(":")[0].strip().lower()
    if nproc > split and method in _SPLIT_ORDER:
        out.append(_SPLIT_ORDER[method])
    return out


def verdict(cell: dict[str, Any], results: dict[str, Any]) -> tuple[Verdict | None, str]:
    """(verdict, the sentence that says which test applied, with its numbers)."""
    tol, ref = cell.get("tolerance", results["tolerance"]), results.get("reference")
    diff, mean = cell.get("loss_max_abs_diff"), cell.get("loss_mean_abs_diff")
    if diff is None or mean is None:
        return None, "not compared"
    if cell["key"] == ref:
        return "exact", "the reference"
    if diff <= tol:
        return "exact", f"max |Δloss| {diff:.1e} ≤ {tol:.0e} at every step"
    floor, kinds = _floor_for(results, cell["nproc"])
    if floor is None:
        return "not_equivalent", f"max |Δloss| {diff:.1e} > {tol:.0e}, and no noise floor could be measured"
    bound = max(NOISE_FACTOR * floor, tol)
    names = " and ".join({"float_order": "float-order", "seed": "seed"}[k] for k in kinds)
    which = f"the larger of the {names} floors" if len(kinds) > 1 else f"the {names} floor"
    if mean <= bound:
        return "within_noise", f"mean |Δloss| {mean:.1e} ≤ {NOISE_FACTOR:g} × {floor:.1e} ({which})"
    return "not_equivalent", (f"mean |Δloss| {mean:.1e} > {NOISE_FACTOR:g} × {floor:.1e} ({which}): a different "
                              "training, not noise")


def judge(results: dict[str, Any], ref_cell: dict[str, Any] | None) -> None:
    """Fill each cell's ``equivalence``, ``equivalence_reason`` (the test and its numbers), ``equivalence_causes``
    (what in the model makes it differ) and ``loss_mean_abs_diff`` (in place)."""
    facts = ref_cell.get("model") if ref_cell else None
    for cell in results["cells"]:
        if ref_cell is not None and cell.get("loss_max_abs_diff") is not None:
            cell["loss_mean_abs_diff"] = mean_abs_diff(cell["losses"], ref_cell["losses"])
        else:
            cell.setdefault("loss_mean_abs_diff", None)
        cell["equivalence"], cell["equivalence_reason"] = verdict(cell, results)
        inexact = cell["equivalence"] in ("within_noise", "not_equivalent")
        cell["equivalence_causes"] = (causes(cell.get("model") or facts, cell["nproc"], cell.get("spec") or "")
                                      if inexact else [])
    results["noise_factor"] = NOISE_FACTOR
    results.setdefault("floors", {})


__all__ = ["NOISE_FACTOR", "Floor", "floors_needed", "judge", "verdict"]
