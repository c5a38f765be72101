"""Turn a ``paratrain compare`` results dict into a decision: a recommendation in plain words, a table, and files.

Why plain words: a table of twelve columns does not say which method to use. :func:`recommend` picks the fastest
method whose losses match the reference (a faster method that trains a different model is not a speed-up) and
says why, with the numbers. A cell whose max |Δloss| exceeds :data:`TOLERANCE` is never hidden: it is shown in red
and called NOT EQUIVALENT everywhere. ``scaling_efficiency`` and ``comm_share`` are fractions (0.95 = 95 %). Noise is
not stated as fact either: an efficiency above 100 %, or one measured against a noisy one-process base, is shown as
unreliable with the reason (:func:`efficiency_note`) and never cited as a merit.
"""

from __future__ import annotations

import csv
import json
import shlex
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from paratrain.bench.equivalence_report import equivalence_markdown
from paratrain.bench.explain import bound_lines, breakdown_markdown

TOLERANCE = 1e-5  # max |Δloss| above this: the cell is not training the same model
MIB = 1 << 20
WINNER_MARK = "★"
DASH = "—"
COLUMNS = ("method", "procs × threads", "samples/s", "step ms median/p90", "epoch s", "start-up s", "peak mem/rank MiB",
           "state/rank MiB", "scaling eff", "final loss / quality", "max |Δloss|", "status")
CSV_FIELDS = ("key", "strategy", "nproc", "status", "samples_per_s", "tokens_per_s", "step_time_median_s",
              "step_time_p90_s", "startup_s", "wall_s", "peak_mem_bytes_max", "peak_mem_kind", "state_bytes_max",
              "comm_share", "scaling_efficiency", "scaling_efficiency_note", "final_loss", "loss_max_abs_diff",
              "loss_mean_abs_diff", "equivalent", "equivalence", "epoch_wall_s", "winner",
              "threads_per_process", "oversubscribed", "error", "log")


def _ok(cell: dict[str, Any]) -> bool:
    return cell.get("status") == "ok"


def _sps(cell: dict[str, Any]) -> float | None:
    return cell.get("samples_per_s") if _ok(cell) else None


def tolerance(item: dict[str, Any]) -> float:
    """The equivalence tolerance a cell (or a whole run) was judged by: 1e-5 in fp32, wider in 16-bit precisions
    (compare.finalize records it; older results have none and were fp32)."""
    return item.get("tolerance") or TOLERANCE


def _flagged(cell: dict[str, Any]) -> bool:
    """Not training the same model: judged ``not_equivalent`` (older results without a verdict: max |Δloss| above
    the tolerance)."""
    if "equivalence" in cell:
        return cell["equivalence"] == "not_equivalent"
    diff = cell.get("loss_max_abs_diff")
    return diff is not None and diff > tolerance(cell)


def _noisy(cell: dict[str, Any]) -> bool:
    return cell.get("equivalence") == "within_noise"


NOISY_STEPS = 2.0  # a p90 step this many times the median: the machine was busy, the median itself may be inflated


def step_spread(cell: dict[str, Any]) -> float | None:
    """p90 step time ÷ median: 1.1 on a quiet machine; far above, other load (or a straggler) slowed many steps."""
    med, p90 = cell.get("step_time_median_s"), cell.get("step_time_p90_s")
    return p90 / med if med and p90 is not None else None


def efficiency_base(cell: dict[str, Any], results: dict[str, Any]) -> dict[str, Any] | None:
    """The one-process cell ``cell``'s efficiency was measured against, as compare.finalize chose it: the same
    method on one process, else the reference."""
    ok = [c for c in results.get("cells") or [] if _sps(c)]
    same = next((c for c in ok if c.get("strategy") == cell.get("strategy") and c.get("nproc") == 1), None)
    return same or next((c for c in ok if c["key"] == results.get("reference")), None)


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
        cell["scaling_efficiency_note"] = efficiency_note(cell, efficiency_base(cell, results)) if _ok(cell) else None


def _eff_words(cell: dict[str, Any]) -> str | None:
    """The efficiency as the recommendation cites it among a cell's numbers; None for one process, when not
    measured, and when unreliable (:func:`_eff_caveat` says so instead: noise is no merit)."""
    eff = cell.get("scaling_efficiency")
    if cell.get("nproc", 1) <= 1 or eff is None or cell.get("scaling_efficiency_note"):
        return None
    return f"{_pct(eff)} scaling efficiency"


def _eff_caveat(cell: dict[str, Any]) -> str:
    """The sentence a line ends with when its cell's efficiency is unreliable, else nothing."""
    note = cell.get("scaling_efficiency_note")
    return f" Its scaling efficiency, {_pct(cell['scaling_efficiency'])} as measured, is {note}." if note else ""


def _max(values: list[int | None] | None) -> int | None:
    """Max over ranks; a rank killed before its summary reports None and is left out."""
    known = [v for v in values or [] if v is not None]
    return max(known) if known else None


def ranked(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells by throughput, fastest first; ok cells without a throughput next, failed/unavailable last."""
    cells = results.get("cells") or []
    ok = sorted((c for c in cells if _sps(c) is not None), key=lambda c: -c["samples_per_s"])
    return ok + [c for c in cells if _ok(c) and _sps(c) is None] + [c for c in cells if not _ok(c)]


def _winner_key(results: dict[str, Any]) -> str | None:
    rec = results.get("recommendation")
    return rec.get("winner") if isinstance(rec, dict) else recommend(results)["winner"]


def _x(ratio: float) -> str:
    return f"{ratio:.0f}×" if ratio >= 100 else f"{ratio:.2g}×"


def _pct(frac: float) -> str:
    return f"{frac * 100:.0f} %"


def _winner_line(win: dict[str, Any], base: dict[str, Any] | None, others: int) -> str:
    parts = [f"{win['samples_per_s']:,.0f} samples/s"]
    if base is not None and base is not win and base.get("samples_per_s"):
        parts.append(f"{_x(win['samples_per_s'] / base['samples_per_s'])} {base['key']} throughput")
    if _eff_words(win):
        parts.append(str(_eff_words(win)))
    if win.get("comm_share") is not None:
        parts.append(f"{_pct(win['comm_share'])} of step time in communication")
    if base is not None and base is not win and _noisy(win):
        parts.append(f"losses within measured noise of {base['key']} ({win['equivalence_reason']})")
    elif base is not None and base is not win and win.get("loss_max_abs_diff") is not None:
        parts.append(f"same losses as {base['key']} (max |Δloss| {win['loss_max_abs_diff']:.1e})")
    line = f"Use {win['key']}: " + ", ".join(parts) + "." + _eff_caveat(win)
    if base is win and others:
        line += " No parallel method beat one process at this model size: communication costs more than it saves."
    return line


def _other_line(cell: dict[str, Any], win: dict[str, Any] | None, ref_key: str | None) -> str:
    line = _other_words(cell, win, ref_key)
    return line if _flagged(cell) else line + _eff_caveat(cell)


def _other_words(cell: dict[str, Any], win: dict[str, Any] | None, ref_key: str | None) -> str:
    key = cell["key"]
    speed = (f"{_x(cell['samples_per_s'] / win['samples_per_s'])} {win['key']} speed"
             if win and cell.get("samples_per_s") is not None and win.get("samples_per_s") else "speed not measured")
    if _flagged(cell):
        why = cell.get("equivalence_reason") or (f"max |Δloss| {cell['loss_max_abs_diff']:.1e} is above the "
                                                 f"{tolerance(cell):.0e} tolerance")
        return (f"{key}: NOT EQUIVALENT to {ref_key} — {why} — so its {speed} does not count; check its loss curve "
                "and log.")
    if key == ref_key:
        return f"{key} (the reference): {speed}."
    tail = f", {_eff_words(cell)}" if _eff_words(cell) else ""
    if cell.get("loss_max_abs_diff") is None:
        return f"{key}: {speed}{tail} (losses not compared: no reference)."
    if _noisy(cell):
        why = "; ".join(cell.get("equivalence_causes") or [])
        return (f"{key}: losses within noise ({cell['equivalence_reason']}{': ' + why if why else ''}) but {speed} "
                f"at this size{tail}.")
    return f"{key}: equal loss but {speed} at this size{tail}."


def _memory_lines(ok: list[dict[str, Any]], win: dict[str, Any]) -> list[str]:
    """Name the cells that hold less model state per rank than the winner: the choice when memory is the limit."""
    lines, ws = [], _max(win.get("state_bytes"))
    for cell in ok:
        cs = _max(cell.get("state_bytes"))
        if cell is win or not ws or cs is None or cs >= 0.95 * ws:
            continue
        caveat = " (but its losses are NOT EQUIVALENT)" if _flagged(cell) else ""
        lines.append(f"{cell['key']} holds {_pct(1 - cs / ws)} less model state per rank than {win['key']} "
                     f"({cs / MIB:.2f} vs {ws / MIB:.2f} MiB): the choice if the model does not fit{caveat}.")
    return lines


NOISE = 0.05  # throughput differences under 5 % are within run-to-run noise on a shared machine


def spread(cell: dict[str, Any]) -> float:
    """Run-to-run spread of a cell's throughput over its --repeat runs, (max − min) / median; 0 with one run."""
    runs = sorted(v for v in cell.get("repeat_samples_per_s") or [] if v)
    return (runs[-1] - runs[0]) / runs[len(runs) // 2] if len(runs) > 1 else 0.0


def noise(candidates: list[dict[str, Any]]) -> float:
    """Differences under this are not differences: 5 %, or the widest spread --repeat measured."""
    return max([NOISE, *(spread(c) for c in candidates)])


def _simplest_of_the_fastest(candidates: list[dict[str, Any]], ref_key: str | None) -> dict[str, Any] | None:
    """The fastest cell, unless a simpler one (fewer processes, or the reference itself) is within noise of it:
    nobody should be told to switch to a distributed method for a 2 % difference."""
    if not candidates:
        return None
    best = _sps(candidates[0]) or 0.0
    close = [c for c in candidates if (_sps(c) or 0.0) >= best * (1 - noise(candidates))]
    return min(close, key=lambda c: (c.get("nproc", 1), c["key"] != ref_key, -(_sps(c) or 0.0)))


def _oversubscribed_line(cell: dict[str, Any], results: dict[str, Any]) -> str:
    cores = (results.get("env") or {}).get("cores")
    on = f" on {cores} cores" if cores else ""
    return (f"{cell['key']} ran oversubscribed ({cell['nproc']} processes × {cell.get('threads_per_process')} "
            f"thread(s){on}): its processes took turns, so its speed says little about a machine with a core each.")


def _noisy_steps_line(cell: dict[str, Any]) -> str:
    return (f"{cell['key']}'s steps were noisy (p90 step {step_spread(cell):.1f}× its median): something slowed many "
            "of them, so its speed, and every ratio against it, is uncertain; rerun with --repeat 3 on a quiet "
            "machine.")


def recommend(results: dict[str, Any]) -> dict[str, Any]:
    """``{"winner": key or None, "lines": [...]}``: the fastest ok cell whose losses match the reference (or were
    not compared), and one sentence per cell saying how it compares, grounded in the measured numbers.

    Also stores each cell's ``scaling_efficiency_note`` (:func:`note_efficiencies`), which the lines rely on."""
    note_efficiencies(results)
    cells = results.get("cells") or []
    if not cells:
        return {"winner": None, "lines": ["No methods were run, so there is nothing to compare."]}
    ok = [c for c in ranked(results) if _sps(c) is not None]
    candidates = [c for c in ok if not _flagged(c)]
    ref_key = results.get("reference")
    win = _simplest_of_the_fastest(candidates, ref_key)
    base = next((c for c in ok if c["key"] == ref_key), None)
    lines: list[str] = []
    if win is not None:
        lines.append(_winner_line(win, base, len(ok) - 1))
        fastest = max(candidates, key=lambda c: _sps(c) or 0.0)
        if fastest is not win:
            measured = "the widest spread --repeat measured" if noise(candidates) > NOISE else "this machine's noise"
            lines.append(f"{fastest['key']} measured {_x(_sps(fastest) / _sps(win))} {win['key']}, within run-to-run "
                         f"noise (±{noise(candidates) * 100:.0f} %, {measured}): a tie, so the simpler "
                         f"{win['key']} is recommended.")
    elif ok:
        beyond = ("beyond the noise floors measured in this run" if results.get("floors")
                  else f"by more than {tolerance(results):.0e}")
        lines.append(f"No recommendation: every method that finished has losses that differ from {ref_key} {beyond}.")
    else:
        lines.append("No recommendation: no method finished; the reasons are below.")
    if ok and base is None:
        one = "mirrored" if all(c.get("framework") == "tensorflow" for c in ok) else "single"
        lines.append("No single-process reference finished, so speed-ups and loss equivalence are not measured "
                     f"against one process; include `{one}` with --nproc 1 to get them.")
    lines += [_other_line(c, win, ref_key) for c in ok if c is not win]
    if win is not None:
        lines += _memory_lines(ok, win)
    lines += [f"{c['key']} {c.get('status')}: {c.get('error') or 'no reason recorded'}" for c in cells if not _ok(c)]
    lines += [_oversubscribed_line(c, results) for c in ok if c.get("oversubscribed")]
    lines += [_noisy_steps_line(c) for c in ok if (step_spread(c) or 0.0) >= NOISY_STEPS]
    lines += bound_lines(results, win["key"] if win else None)
    if len(cells) == 1:
        lines.append(f"Only one method ran ({cells[0]['key']}); pass more with --strategies to compare.")
    return {"winner": win["key"] if win else None, "lines": lines}


def _num(value: float | None, fmt: str) -> str:
    return DASH if value is None else format(value, fmt)


def _ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1e3:.1f}"


def _mib(nbytes: int | None, fmt: str = ",.1f") -> str:
    return DASH if nbytes is None else format(nbytes / MIB, fmt)


def _md_row(cols: Iterable[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cols) + " |"


def _diff_text(cell: dict[str, Any], ref_key: str | None) -> str:
    if cell["key"] == ref_key:
        return "ref"
    diff = cell.get("loss_max_abs_diff")
    text = DASH if diff is None else ("0" if diff == 0 else f"{diff:.1e}")
    return text + " ≈ noise" if _noisy(cell) else text


def _row(cell: dict[str, Any], winner: str | None, ref_key: str | None) -> list[str]:
    mem, state = _max(cell.get("peak_mem_bytes")), _max(cell.get("state_bytes"))
    med, p90 = cell.get("step_time_median_s"), cell.get("step_time_p90_s")
    eff = cell.get("scaling_efficiency")
    eff_text = DASH if eff is None else _pct(eff) + (" (unreliable)" if cell.get("scaling_efficiency_note") else "")
    return [
        f"{WINNER_MARK} {cell['key']}" if cell["key"] == winner else cell["key"],
        _procs(cell),
        _num(cell.get("samples_per_s"), ",.1f"),
        DASH if med is None else f"{_ms(med)}/{_ms(p90)}",
        _num(cell.get("epoch_wall_s"), ".2f"),
        _num(cell.get("startup_s"), ".1f"),
        _mib(mem) + (" (cuda)" if mem is not None and cell.get("peak_mem_kind") == "cuda" else ""),
        _mib(state, ",.2f"),
        eff_text,
        _num(cell.get("final_loss"), ".4g") + _quality(cell),
        _diff_text(cell, ref_key),
    ]


def _procs(cell: dict[str, Any]) -> str:
    """"2 × 1": processes × CPU threads each (older results have no thread count); flagged when oversubscribed."""
    text = str(cell.get("nproc", ""))
    if cell.get("threads_per_process"):
        text += f" × {cell['threads_per_process']}"
    return text + (" oversubscribed" if cell.get("oversubscribed") else "")


def _quality(cell: dict[str, Any]) -> str:
    """What the workload reports beyond the loss (test accuracy, perplexity): proof that training worked."""
    short = {"accuracy": "acc", "perplexity": "ppl"}
    parts = [f"{short.get(k, k)} {v:.3g}" for k, v in (cell.get("extra") or {}).items() if isinstance(v, (int, float))]
    return f" ({', '.join(parts)})" if parts else ""


def _status(cell: dict[str, Any]) -> tuple[str, str | None]:
    """(status word, reason or None)."""
    if _ok(cell):
        return ("ok, NOT EQUIVALENT" if _flagged(cell) else "ok"), None
    return str(cell.get("status")), cell.get("error") or "no reason recorded"


def _caption(results: dict[str, Any]) -> str:
    ref = results.get("reference")
    against = f"against {ref}" if ref else "not compared (no reference)"
    text = f"{WINNER_MARK} recommended · max |Δloss| {against}; above {tolerance(results):.0e} = NOT EQUIVALENT"
    if results.get("floors"):
        text += (f" unless the mean |Δloss| is within {results.get('noise_factor', 3):g}× the measured noise floor "
                 "(≈ noise; see the report's Equivalence section)")
    return text


def _efficiency_footnotes(results: dict[str, Any]) -> list[str]:
    """One line per unreliable efficiency, under the table: the reason is too long for its column."""
    return [f"Scaling eff of {c['key']}, {_pct(c['scaling_efficiency'])}, is {c['scaling_efficiency_note']}."
            for c in ranked(results) if c.get("scaling_efficiency_note")]


EFF_COLUMN = COLUMNS.index("scaling eff")


def results_table(results: dict[str, Any]) -> Table:
    """The comparison as a rich Table, fastest first, the winner starred, non-equivalent losses in red, unreliable
    efficiencies in yellow with their reasons in the caption."""
    note_efficiencies(results)
    winner, ref = _winner_key(results), results.get("reference")
    caption = "\n".join([_caption(results), *_efficiency_footnotes(results)])
    table = Table(title=f"paratrain compare — {escape(str(results.get('id', '')))}", title_justify="left",
                  caption=escape(caption), caption_justify="left", header_style="bold")
    for name in COLUMNS:
        table.add_column(escape(name), justify="left" if name in ("method", "status") else "right")
    for cell in ranked(results):
        cols = [escape(v) for v in _row(cell, winner, ref)]
        if _flagged(cell):
            cols[-1] = f"[bold red]{cols[-1]}[/]"
        if cell.get("scaling_efficiency_note"):
            cols[EFF_COLUMN] = f"[yellow]{cols[EFF_COLUMN]}[/]"
        if cell["key"] == winner:
            cols[0] = f"[bold green]{cols[0]}[/]"
        word, why = _status(cell)
        colour = {"ok": "green", "unavailable": "yellow"}.get(word, "red")
        cols.append(f"[{colour}]{escape(word)}[/]" + (f": {escape(why)}" if why else ""))
        table.add_row(*cols)
    return table


def results_markdown(results: dict[str, Any]) -> str:
    """The same table as GitHub markdown; a flagged Δloss reads **… NOT EQUIVALENT** (no colour in markdown)."""
    note_efficiencies(results)
    winner, ref = _winner_key(results), results.get("reference")
    out = [_md_row(COLUMNS), "|" + "---|" * len(COLUMNS)]
    for cell in ranked(results):
        cols = _row(cell, winner, ref)
        if _flagged(cell):
            cols[-1] = f"**{cols[-1]} NOT EQUIVALENT**"
        word, why = _status(cell)
        cols.append(word + (f": {why}" if why else ""))
        out.append(_md_row(cols))
    notes = "".join(f"\n\n{line}" for line in _efficiency_footnotes(results))
    return "\n".join(out) + f"\n\n{_caption(results)}{notes}\n"


def reproduce_command(results: dict[str, Any]) -> str:
    """The ``paratrain compare`` command line that repeats this run's settings."""
    s = results.get("settings") or {}
    cmd = ["paratrain", "compare"]
    if s.get("workload"):
        cmd += ["--workload", s["workload"]]
    elif s.get("script"):
        cmd += ["--script", str(s["script"])]
        if s.get("script_args"):
            cmd += ["--script-args", shlex.join(map(str, s["script_args"]))]
    cmd += ["--strategies", ",".join(s.get("strategies") or []), "--nproc", ",".join(map(str, s.get("nproc") or []))]
    for key in ("steps", "warmup", "repeat", "scaling", "width", "depth"):  # the global batch follows the workload
        if s.get(key) is not None:
            cmd += [f"--{key}", str(s[key])]
    if s.get("precision") not in (None, "fp32"):
        cmd += ["--precision", str(s["precision"])]
    return shlex.join(cmd)


def _or_script(value: Any, otherwise: str) -> str:
    return otherwise if value is None else str(value)


def _settings_md(results: dict[str, Any]) -> list[str]:
    s = results.get("settings") or {}
    what = (f"workload `{s['workload']}`" if s.get("workload")
            else f"script `{shlex.join([str(s.get('script')), *map(str, s.get('script_args') or [])])}`")
    tokens = f", {s['tokens_per_sample']} tokens per sample" if s.get("tokens_per_sample") else ""
    return [f"- What: {what}", f"- Methods: {', '.join(s.get('strategies') or [])}",
            f"- Processes: {', '.join(map(str, s.get('nproc') or []))}",
            f"- Steps: {_or_script(s.get('steps'), 'as many as the script runs')} (the first {s.get('warmup')} are "
            f"warm-up, not timed), repeat {s.get('repeat')}",
            f"- Scaling: {s.get('scaling')}, global batch {_or_script(s.get('global_batch'), 'the script’s loader')}"
            f"{tokens}",
            f"- Precision: {s.get('precision') or 'fp32'}",
            f"- CPU threads: {_threads_text(results)}"]


def _threads_text(results: dict[str, Any]) -> str:
    cores = (results.get("env") or {}).get("cores")
    if not cores:
        return "not recorded"
    return (f"every cell gets the same machine: its processes together use the {cores} cores this run may use "
            "(threads per process = cores / processes, as each worker reported it in the table)")


def _env_md(results: dict[str, Any]) -> list[str]:
    env = results.get("env") or {}
    inv = env.get("inventory") or {}
    gpus = inv.get("gpus") or []
    if gpus:
        labels = Counter(f"{g.get('name')} ({g.get('memory_total_mib') or '?'} MiB)" for g in gpus)
        gpu_text = ", ".join(f"{n} × {label}" for label, n in labels.items())
    else:
        gpu_text = "none" + (f" ({inv['reason']})" if inv.get("reason") else "")
    cpu = inv.get("cpu") or {}
    cpu_text = (f"{cpu.get('cores')} cores ({cpu.get('logical_cores')} logical), {cpu.get('memory_gib')} GiB RAM"
                if cpu else "unknown")
    return [f"- Python {env.get('python')}, torch {env.get('torch')}, {env.get('platform')}",
            f"- Host: {env.get('hostname')}", f"- GPUs: {gpu_text}", f"- CPU: {cpu_text}"]


def _report_md(results: dict[str, Any], plots: list[Path] | None) -> str:
    rec = results["recommendation"]
    parts = [f"# paratrain compare — {results.get('id')}", "",
             f"Created {results.get('created')} with paratrain {results.get('paratrain')}.", "",
             "## Settings", "", *_settings_md(results), "", "## Environment", "", *_env_md(results), "",
             "## Results", "", results_markdown(results), "## Where the time goes", "",
             *breakdown_markdown(results), "", "## Recommendation", "",
             *[f"- {line}" for line in rec["lines"]], "", "## Plots", ""]
    if plots is None:
        parts.append('Plots were skipped: matplotlib is not installed. Install it with `pip install '
                     f'"paratrain[plots]"` and run `paratrain report {results.get("id")}` to add them.')
    else:
        parts += [f"![{p.stem.replace('_', ' ')}]({p.name})" for p in plots]
    parts += ["", "## Equivalence", "", *equivalence_markdown(results), "", "## How to reproduce", "", "```",
              reproduce_command(results), "```"]
    logs = [f"- {c['key']}: `{c['log']}`" for c in results.get("cells") or [] if c.get("log")]
    if logs:
        parts += ["", "## Logs", "", *logs]
    return "\n".join(parts) + "\n"


def _csv_row(cell: dict[str, Any], winner: str | None) -> dict[str, Any]:
    row = {k: cell.get(k) for k in CSV_FIELDS}
    row.update(peak_mem_bytes_max=_max(cell.get("peak_mem_bytes")), state_bytes_max=_max(cell.get("state_bytes")),
               equivalent=None if cell.get("loss_max_abs_diff") is None else not _flagged(cell),
               equivalence=cell.get("equivalence"),
               winner=cell["key"] == winner)
    row.update({f"extra_{k}": v for k, v in (cell.get("extra") or {}).items()})
    return row


def write_outputs(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write results.json, results.csv, the plots and report.md into ``out_dir``; return their paths by name.

    Fills ``results["recommendation"]`` in place, so the dict the caller saves to the history next carries the
    same recommendation as the files. Missing matplotlib skips the plots (report.md says how to get them).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results["recommendation"] = recommend(results)
    winner = results["recommendation"]["winner"]
    paths = {"json": out_dir / "results.json", "csv": out_dir / "results.csv", "report": out_dir / "report.md"}
    paths["json"].write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    extras = sorted({f"extra_{k}" for c in results.get("cells") or [] for k in c.get("extra") or {}})
    with paths["csv"].open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*CSV_FIELDS, *extras])
        writer.writeheader()
        writer.writerows(_csv_row(c, winner) for c in ranked(results))
    try:
        from paratrain.bench.plots import plot_all

        plots: list[Path] | None = plot_all(results, out_dir)
    except ImportError:
        plots = None
    for p in plots or []:
        paths[p.stem] = p
    paths["report"].write_text(_report_md(results, plots), encoding="utf-8")
    return paths


def diff_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One dict per cell key present in either run (A's order first): throughput, step time, memory, status."""
    ca = {c["key"]: c for c in a.get("cells") or []}
    cb = {c["key"]: c for c in b.get("cells") or []}
    rows = []
    for key in [*ca, *(k for k in cb if k not in ca)]:
        x, y = ca.get(key, {}), cb.get(key, {})
        sa, sb = _sps(x) if x else None, _sps(y) if y else None
        rows.append({"key": key, "samples_per_s_a": sa, "samples_per_s_b": sb,
                     "ratio": sb / sa if sa and sb is not None else None,
                     "step_median_s_a": x.get("step_time_median_s"), "step_median_s_b": y.get("step_time_median_s"),
                     "peak_mem_bytes_a": _max(x.get("peak_mem_bytes")),
                     "peak_mem_bytes_b": _max(y.get("peak_mem_bytes")),
                     "status_a": x.get("status", "absent"), "status_b": y.get("status", "absent")})
    return rows


DIFF_COLUMNS = ("method", "samples/s A", "samples/s B", "B/A", "step ms A", "step ms B", "peak MiB A", "peak MiB B",
                "status")


def _diff_cols(r: dict[str, Any]) -> list[str]:
    status = r["status_a"] if r["status_a"] == r["status_b"] else f"{r['status_a']} → {r['status_b']}"
    return [r["key"], _num(r["samples_per_s_a"], ",.1f"), _num(r["samples_per_s_b"], ",.1f"),
            DASH if r["ratio"] is None else f"{r['ratio']:.2f}×", _ms(r["step_median_s_a"]), _ms(r["step_median_s_b"]),
            _mib(r["peak_mem_bytes_a"]), _mib(r["peak_mem_bytes_b"]), status]


def diff_table(a: dict[str, Any], b: dict[str, Any]) -> Table:
    """Run B against run A, cell by cell; B/A > 1 means B is faster. Slower cells and status changes are marked."""
    table = Table(title=escape(f"A = {a.get('id')}  vs  B = {b.get('id')}"), title_justify="left",
                  header_style="bold")
    for name in DIFF_COLUMNS:
        table.add_column(name, justify="left" if name in ("method", "status") else "right")
    for r in diff_rows(a, b):
        cols = [escape(c) for c in _diff_cols(r)]
        if r["ratio"] is not None:
            cols[3] = f"[{'green' if r['ratio'] >= 1 else 'red'}]{cols[3]}[/]"
        if r["status_a"] != r["status_b"]:
            cols[-1] = f"[yellow]{cols[-1]}[/]"
        table.add_row(*cols)
    return table


def diff_markdown(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The same comparison as markdown (diff.md)."""
    lines = [f"# paratrain: {a.get('id')} (A) vs {b.get('id')} (B)", "", "B/A above 1 means B is faster.", "",
             _md_row(DIFF_COLUMNS), "|" + "---|" * len(DIFF_COLUMNS)]
    lines += [_md_row(_diff_cols(r)) for r in diff_rows(a, b)]
    return "\n".join(lines) + "\n"
