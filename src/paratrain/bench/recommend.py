"""Decide a ``paratrain compare``: which cell wins, and why, in plain words grounded in the measured numbers.

Why plain words: a table of twelve columns does not say which method to use. :func:`recommend` picks the fastest
method whose losses match the reference (a faster method that trains a different model is not a speed-up) and
says why, with the numbers. A cell whose max |Δloss| exceeds :data:`TOLERANCE` is never recommended and is called
NOT EQUIVALENT. ``scaling_efficiency`` and ``comm_share`` are fractions (0.95 = 95 %). Noise is not stated as fact
either: an efficiency above 100 %, or one measured against a noisy one-process base, is called unreliable with the
reason (:func:`efficiency_note`) and never cited as a merit.

Kept apart from report.py (the table, report.md and the other files) so that the plots, the history and the advisor
can ask the same questions — is this cell equivalent, is its efficiency reliable — without importing the renderer.
"""

from __future__ import annotations

from typing import Any

from paratrain.bench import disturbance
from paratrain.bench.explain import bound_lines

TOLERANCE = 1e-5  # max |Δloss| above this: the cell is not training the same model
MIB = 1 << 20


def is_ok(cell: dict[str, Any]) -> bool:
    """The cell ran to the end; failed and unavailable cells have nothing to rank."""
    return cell.get("status") == "ok"


def throughput(cell: dict[str, Any]) -> float | None:
    """Samples/s of a cell that finished, else None: a failed cell's partial number must never rank it."""
    return cell.get("samples_per_s") if is_ok(cell) else None


def tolerance(item: dict[str, Any]) -> float:
    """The equivalence tolerance a cell (or a whole run) was judged by: 1e-5 in fp32, wider in 16-bit precisions
    (bench/finalize.py records it; older results have none and were fp32)."""
    return item.get("tolerance") or TOLERANCE


def is_flagged(cell: dict[str, Any]) -> bool:
    """Not training the same model: judged ``not_equivalent`` (older results without a verdict: max |Δloss| above
    the tolerance)."""
    if "equivalence" in cell:
        return cell["equivalence"] == "not_equivalent"
    diff = cell.get("loss_max_abs_diff")
    return diff is not None and diff > tolerance(cell)


def is_noisy(cell: dict[str, Any]) -> bool:
    """Judged equivalent only within the measured noise floor, not exactly: said so wherever its losses are cited."""
    return cell.get("equivalence") == "within_noise"


NOISY_STEPS = 2.0  # a p90 step this many times the median: the machine was busy, the median itself may be inflated


def step_spread(cell: dict[str, Any]) -> float | None:
    """p90 step time ÷ median: 1.1 on a quiet machine; far above, other load (or a straggler) slowed many steps."""
    med, p90 = cell.get("step_time_median_s"), cell.get("step_time_p90_s")
    return p90 / med if med and p90 is not None else None


def efficiency_base(cell: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The one-process cell ``cell``'s efficiency was measured against, as bench/finalize.py chose it: the same
    method on one process, else the reference."""
    ok = [c for c in results.get("cells") or [] if throughput(c)]
    same = next((c for c in ok if c.get("strategy") == cell.get("strategy") and c.get("nproc") == 1), None)
    return same or next((c for c in ok if c["key"] == results.get("reference") and c.get("nproc") == 1), None)


def efficiency_note(cell: dict[str, Any], base: dict[str, Any] | None) -> str | None:
    """Why ``cell``'s scaling efficiency is not to be trusted, or None when it can be.

    Why: efficiency is throughput ÷ (N × the base's throughput), so a base measured slow inflates it. Splitting the
    work over N processes cannot make each one faster than one process alone (no superlinear effect is expected on
    CPU), so above 100 % says the base was measured slow; a base whose p90 step is ≥ :data:`NOISY_STEPS`× its median
    ran on a busy machine, so even an efficiency below 100 % may be overstated.
    """
    eff = cell.get("scaling_efficiency")
    if eff is None or base is None or base is cell or base["key"] == cell["key"]:
        return None
    if base.get("disturbed"):
        return f"unreliable: the 1-process base {base['key']} was disturbed ({base['disturbed']})"
    spread = step_spread(base)
    noisy = (f"the 1-process base {base['key']} was noisy (p90 step {spread:.1f}× its median), so its throughput "
             "is likely understated" if spread is not None and spread >= NOISY_STEPS else None)
    if eff > 1:
        why = noisy or (f"{cell.get('nproc')} processes should not each run faster than {base['key']} alone, so "
                        f"{base['key']} was probably measured slow")
        return f"unreliable: above 100 % — {why}"
    return f"unreliable: {noisy}, and this efficiency overstated" if noisy else None


def note_efficiencies(results: dict[str, Any]) -> None:
    """Store each cell's :func:`efficiency_note` as ``scaling_efficiency_note`` (None: reliable or not measured), so
    the table, the recommendation and results.json say the same."""
    for cell in results.get("cells") or []:
        note = efficiency_note(cell, efficiency_base(cell, results)) if is_ok(cell) else None
        cell["scaling_efficiency_note"] = note


def _eff_words(cell: dict[str, Any]) -> str | None:
    """The efficiency as the recommendation cites it among a cell's numbers; None for one process, when not
    measured, and when unreliable (:func:`_eff_caveat` says so instead: noise is no merit)."""
    eff = cell.get("scaling_efficiency")
    if cell.get("nproc", 1) <= 1 or eff is None or cell.get("scaling_efficiency_note"):
        return None
    return f"{pct(eff)} scaling efficiency"


def _eff_caveat(cell: dict[str, Any]) -> str:
    """The sentence a line ends with when its cell's efficiency is unreliable, else nothing."""
    note = cell.get("scaling_efficiency_note")
    return f" Its scaling efficiency, {pct(cell['scaling_efficiency'])} as measured, is {note}." if note else ""


def rank_max(values: list[int | None] | None) -> int | None:
    """Max over ranks; a rank killed before its summary reports None and is left out."""
    known = [v for v in values or [] if v is not None]
    return max(known) if known else None


def ranked(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells by throughput, fastest first; ok cells without a throughput next, failed/unavailable last."""
    cells = results.get("cells") or []
    ok = sorted((c for c in cells if throughput(c) is not None), key=lambda c: -c["samples_per_s"])
    return ok + [c for c in cells if is_ok(c) and throughput(c) is None] + [c for c in cells if not is_ok(c)]


def _x(ratio: float) -> str:
    return f"{ratio:.0f}×" if ratio >= 100 else f"{ratio:.2g}×"


def pct(frac: float) -> str:
    """A fraction as the report prints it (0.95 → "95 %")."""
    return f"{frac * 100:.0f} %"


def _winner_line(win: dict[str, Any], base: dict[str, Any] | None, others: int) -> str:
    parts = [f"{win['samples_per_s']:,.0f} samples/s"]
    if base is not None and base is not win and base.get("samples_per_s") and not base.get("disturbed"):
        parts.append(f"{_x(win['samples_per_s'] / base['samples_per_s'])} {base['key']} throughput")
    if _eff_words(win):
        parts.append(str(_eff_words(win)))
    if win.get("comm_share") is not None:
        parts.append(f"{pct(win['comm_share'])} of step time in communication")
    if base is not None and base is not win and is_noisy(win):
        parts.append(f"losses within measured noise of {base['key']} ({win['equivalence_reason']})")
    elif base is not None and base is not win and win.get("loss_max_abs_diff") is not None:
        parts.append(f"same losses as {base['key']} (max |Δloss| {win['loss_max_abs_diff']:.1e})")
    line = f"Use {win['key']}: " + ", ".join(parts) + "." + _eff_caveat(win)
    if base is win and others:
        line += " No parallel method beat one process at this model size: communication costs more than it saves."
    return line


def _other_line(cell: dict[str, Any], win: dict[str, Any] | None, ref_key: str | None) -> str:
    line = _other_words(cell, win, ref_key)
    return line if is_flagged(cell) else line + _eff_caveat(cell)


def _other_words(cell: dict[str, Any], win: dict[str, Any] | None, ref_key: str | None) -> str:
    key = cell["key"]
    speed = (f"{_x(cell['samples_per_s'] / win['samples_per_s'])} {win['key']} speed"
             if win and cell.get("samples_per_s") is not None and win.get("samples_per_s") else "speed not measured")
    if is_flagged(cell):
        why = cell.get("equivalence_reason") or (f"max |Δloss| {cell['loss_max_abs_diff']:.1e} is above the "
                                                 f"{tolerance(cell):.0e} tolerance")
        return (f"{key}: NOT EQUIVALENT to {ref_key} — {why} — so its {speed} does not count; check its loss curve "
                "and log.")
    if key == ref_key:
        return f"{key} (the reference): {speed}."
    tail = f", {_eff_words(cell)}" if _eff_words(cell) else ""
    if cell.get("loss_max_abs_diff") is None:
        return f"{key}: {speed}{tail} (losses not compared: no reference)."
    if is_noisy(cell):
        why = "; ".join(cell.get("equivalence_causes") or [])
        return (f"{key}: losses within noise ({cell['equivalence_reason']}{': ' + why if why else ''}) but {speed} "
                f"at this size{tail}.")
    return f"{key}: equal loss but {speed} at this size{tail}."


def _memory_lines(ok: list[dict[str, Any]], win: dict[str, Any]) -> list[str]:
    """Name the cells that hold less model state per rank than the winner: the choice when memory is the limit."""
    lines, ws = [], rank_max(win.get("state_bytes"))
    for cell in ok:
        cs = rank_max(cell.get("state_bytes"))
        if cell is win or not ws or cs is None or cs >= 0.95 * ws:
            continue
        caveat = " (but its losses are NOT EQUIVALENT)" if is_flagged(cell) else ""
        lines.append(f"{cell['key']} holds {pct(1 - cs / ws)} less model state per rank than {win['key']} "
                     f"({cs / MIB:.2f} vs {ws / MIB:.2f} MiB): the choice if the model does not fit{caveat}.")
    return lines


NOISE = 0.05  # throughput differences under 5 % are within run-to-run noise on a shared machine


def spread(cell: dict[str, Any]) -> float:
    """Run-to-run spread of a cell's throughput over its --repeat runs, (max − min) / median; 0 with one run."""
    runs = sorted(v for v in cell.get("repeat_samples_per_s") or [] if v)
    return (runs[-1] - runs[0]) / runs[len(runs) // 2] if len(runs) > 1 else 0.0


def twin_spread(candidates: list[dict[str, Any]], results: dict[str, Any]) -> float:
    """How far apart two measurements of one computation landed in this comparison: with fewer than two GPUs,
    dp×1 runs as a plain process (strategies/dp.py), so it and single×1 differ by nothing but the machine. 0 when
    one of them did not run (or was disturbed)."""
    gpus = ((results.get("env") or {}).get("inventory") or {}).get("gpus") or []
    twins = [throughput(c) or 0.0 for c in candidates if c.get("nproc") == 1 and c.get("strategy") in ("single", "dp")]
    if len(gpus) >= 2 or len(twins) != 2 or not min(twins):
        return 0.0
    return (max(twins) - min(twins)) / min(twins)


def noise(candidates: list[dict[str, Any]], results: dict[str, Any] | None = None) -> float:
    """Differences under this are not differences: 5 %, the widest spread --repeat measured, or the gap between
    two measurements of one computation (:func:`twin_spread`), whichever is widest."""
    return max([NOISE, *(spread(c) for c in candidates), twin_spread(candidates, results or {})])


def _noise_source(candidates: list[dict[str, Any]], results: dict[str, Any]) -> str:
    if noise(candidates, results) <= NOISE:
        return "this machine's noise"
    if twin_spread(candidates, results) >= max([NOISE, *(spread(c) for c in candidates)]):
        return "how far single×1 and dp×1, one computation here, landed apart"
    return "the widest spread --repeat measured"


def _simplest_of_the_fastest(candidates: list[dict[str, Any]], ref_key: str | None,
                             results: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest cell, unless a simpler one (fewer processes, or the reference itself) is within noise of it:
    nobody should be told to switch to a distributed method for a 2 % difference."""
    if not candidates:
        return None
    best = throughput(candidates[0]) or 0.0
    close = [c for c in candidates if (throughput(c) or 0.0) >= best * (1 - noise(candidates, results))]
    win = min(close, key=lambda c: (c.get("nproc", 1), c["key"] != ref_key, -(throughput(c) or 0.0)))
    single = next((c for c in candidates if c.get("strategy") == "single" and c.get("nproc") == 1), None)
    return single if single is not None and single_work(win, results) else win


def single_work(cell: dict[str, Any], results: dict[str, Any]) -> bool:
    """A torch method on one process (not single itself): it runs single's computation with its own work around it
    (DDP's reducer, FSDP's and ZeRO's bookkeeping), so it cannot be faster than single×1 but by noise. DataParallel
    over two or more GPUs is the exception: its one process drives them all."""
    if cell.get("nproc") != 1 or cell.get("strategy") == "single" or cell.get("framework", "torch") != "torch":
        return False
    gpus = ((results.get("env") or {}).get("inventory") or {}).get("gpus") or []
    return not (cell.get("strategy") == "dp" and len(gpus) >= 2)


def _oversubscribed_line(cell: dict[str, Any], results: dict[str, Any]) -> str:
    cores = (results.get("env") or {}).get("cores")
    on = f" on {cores} cores" if cores else ""
    return (f"{cell['key']} ran oversubscribed ({cell['nproc']} processes × {cell.get('threads_per_process')} "
            f"thread(s){on}): its processes took turns, so its speed says little about a machine with a core each.")


def _noisy_steps_line(cell: dict[str, Any]) -> str:
    return (f"{cell['key']}'s steps were noisy (p90 step {step_spread(cell):.1f}× its median): something slowed many "
            "of them, so its speed, and every ratio against it, is uncertain; rerun with --repeat 3 on a quiet "
            "machine.")


def _disturbed_line(cell: dict[str, Any], win: dict[str, Any] | None) -> str:
    chosen = ("it is not recommended while an undisturbed method can be" if win is None or win is not cell
              else "it is recommended only because no undisturbed method could be")
    again = ", in the run measured again too" if cell.get("remeasured") else ""
    return (f"{cell['key']} was disturbed: {cell['disturbed']}{again}. Its speed, and every ratio against it, is "
            f"uncertain; {chosen}. Rerun on a quiet machine to measure it.")


def _budget_line(results: dict[str, Any], unfit: list[dict[str, Any]], win: dict[str, Any] | None) -> str:
    """Why the cells a memory budget kept from running could not be chosen, and what fitted instead."""
    from paratrain.bench.budget import gib as gib_

    budget = results.get("memory_budget") or {}
    gib = f"{gib_(budget['bytes'])} per rank" if budget.get("bytes") else "the memory budget"
    why = "; ".join(f"{c['key']} {str(c.get('error') or '').removeprefix('does not fit: ')}" for c in unfit)
    fitted = ""
    if win is not None:
        said = [f"advise predicts {gib_(win['predicted_mem']['total'])}"] if win.get("predicted_mem") else []
        peak = rank_max(win.get("peak_mem_bytes"))
        said += [f"it peaked at {gib_(peak)}"] if peak is not None else []
        fitted = f" {win['key']} fits" + (f" ({', '.join(said)} per rank)" if said else "") + "."
    return f"Not started, as they cannot fit {gib} ({budget.get('source', 'budget')}): {why}.{fitted}"


def recommend(results: dict[str, Any]) -> dict[str, Any]:
    """``{"winner": key or None, "lines": [...]}``: the fastest ok cell whose losses match the reference (or were
    not compared), and one sentence per cell saying how it compares, grounded in the measured numbers.

    Also stores each cell's ``scaling_efficiency_note`` (:func:`note_efficiencies`), which the lines rely on."""
    note_efficiencies(results)
    cells = results.get("cells") or []
    if not cells:
        return {"winner": None, "lines": ["No methods were run, so there is nothing to compare."]}
    ok = [c for c in ranked(results) if throughput(c) is not None]
    candidates = [c for c in ok if not is_flagged(c) and not c.get("over_budget")]
    candidates = [c for c in candidates if not c.get("disturbed")] or candidates  # never chosen on a disturbed figure
    ref_key = results.get("reference")
    win = _simplest_of_the_fastest(candidates, ref_key, results)
    base = next((c for c in ok if c["key"] == ref_key), None)
    lines: list[str] = []
    if win is not None:
        lines.append(_winner_line(win, base, len(ok) - 1))
        fastest = max(candidates, key=lambda c: throughput(c) or 0.0)
        if fastest is not win and single_work(fastest, results) and win.get("strategy") == "single":
            lines.append(f"{fastest['key']} measured {_x(throughput(fastest) / throughput(win))} {win['key']}, but on "
                         "one process it runs single's computation, plus any work of its own, so that lead is "
                         f"this machine's noise: a tie, so the simpler {win['key']} is recommended.")
        elif fastest is not win:
            lines.append(f"{fastest['key']} measured {_x(throughput(fastest) / throughput(win))} {win['key']}, within "
                         f"run-to-run noise (±{noise(candidates, results) * 100:.0f} %, "
                         f"{_noise_source(candidates, results)}): a tie, so the simpler "
                         f"{win['key']} is recommended.")
    elif ok and any(not is_flagged(c) for c in ok):
        lines.append("No recommendation: every method that trained the same model went above the memory budget.")
    elif ok:
        beyond = ("beyond the noise floors measured in this run" if results.get("floors")
                  else f"by more than {tolerance(results):.0e}")
        lines.append(f"No recommendation: every method that finished has losses that differ from {ref_key} {beyond}.")
    else:
        lines.append("No recommendation: no method finished; the reasons are below.")
    unfit = [c for c in cells if c.get("status") == "does_not_fit"]
    if unfit:
        lines.append(_budget_line(results, unfit, win))
    if ok and base is None:
        one = "mirrored" if all(c.get("framework") == "tensorflow" for c in ok) else "single"
        lines.append("No single-process reference finished, so speed-ups and loss equivalence are not measured "
                     f"against one process; include `{one}` with --nproc 1 to get them.")
    lines += [_other_line(c, win, ref_key) for c in ok if c is not win]
    if win is not None:
        lines += _memory_lines(ok, win)
    lines += [f"{c['key']} ran, but {c['over_budget']}: not recommended." for c in ok if c.get("over_budget")]
    lines += [f"{c['key']} {c.get('status')}: {c.get('error') or 'no reason recorded'}"
              for c in cells if not is_ok(c) and c.get("status") != "does_not_fit"]
    lines += [_oversubscribed_line(c, results) for c in ok if c.get("oversubscribed")]
    lines += [_noisy_steps_line(c) for c in ok if (step_spread(c) or 0.0) >= NOISY_STEPS]
    lines += [_disturbed_line(c, win) for c in ok if c.get("disturbed")]
    busy = disturbance.busy_machine_line(results)
    lines += [busy] if busy else []
    lines += bound_lines(results, win["key"] if win else None)
    if len(cells) == 1:
        lines.append(f"Only one method ran ({cells[0]['key']}); pass more with --strategies to compare.")
    return {"winner": win["key"] if win else None, "lines": lines}
