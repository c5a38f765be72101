"""Render a decided ``paratrain compare``: the table (terminal and markdown), report.md, results.json/.csv, the plots
and the A-vs-B diff of two runs.

Why rendering only: which cell wins and why is decided in recommend.py, which the plots, the history and the advisor
use too; this module turns that decision and the numbers into files and tables. A cell whose losses are NOT
EQUIVALENT is never hidden: it is shown in red (bold in markdown) everywhere, and an unreliable scaling efficiency is
shown in yellow with its reason under the table.
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
from paratrain.bench.explain import breakdown_markdown
from paratrain.bench.recommend import (
    MIB,
    is_flagged,
    is_noisy,
    is_ok,
    note_efficiencies,
    pct,
    rank_max,
    ranked,
    recommend,
    throughput,
    tolerance,
)

WINNER_MARK = "★"
DASH = "—"
COLUMNS = ("method", "procs × threads", "samples/s", "step ms median/p90", "epoch s", "start-up s", "peak mem/rank MiB",
           "state/rank MiB", "scaling eff", "final loss / quality", "max |Δloss|", "status")
CSV_FIELDS = ("key", "strategy", "nproc", "status", "samples_per_s", "tokens_per_s", "step_time_median_s",
              "step_time_p90_s", "startup_s", "wall_s", "peak_mem_bytes_max", "peak_mem_kind", "state_bytes_max",
              "comm_share", "scaling_efficiency", "scaling_efficiency_note", "final_loss", "loss_max_abs_diff",
              "loss_mean_abs_diff", "equivalent", "equivalence", "epoch_wall_s", "winner",
              "threads_per_process", "oversubscribed", "other_load", "disturbed", "error", "log")


def _winner_key(results: dict[str, Any]) -> str | None:
    rec = results.get("recommendation")
    return rec.get("winner") if isinstance(rec, dict) else recommend(results)["winner"]


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
    return text + " ≈ noise" if is_noisy(cell) else text


def _row(cell: dict[str, Any], winner: str | None, ref_key: str | None) -> list[str]:
    mem, state = rank_max(cell.get("peak_mem_bytes")), rank_max(cell.get("state_bytes"))
    med, p90 = cell.get("step_time_median_s"), cell.get("step_time_p90_s")
    eff = cell.get("scaling_efficiency")
    eff_text = DASH if eff is None else pct(eff) + (" (unreliable)" if cell.get("scaling_efficiency_note") else "")
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
    if is_ok(cell):
        if cell.get("over_budget"):
            return "ok, OVER BUDGET", str(cell["over_budget"])
        if is_flagged(cell):
            return "ok, NOT EQUIVALENT", None
        return ("ok, DISTURBED", str(cell["disturbed"])) if cell.get("disturbed") else ("ok", None)
    if cell.get("status") == "does_not_fit":
        return "does not fit", str(cell.get("error") or "").removeprefix("does not fit: ")
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
    """One line per unreliable efficiency and per cell measured again, under the table: the reasons are too long
    for a column."""
    return [*(f"Scaling eff of {c['key']}, {pct(c['scaling_efficiency'])}, is {c['scaling_efficiency_note']}."
              for c in ranked(results) if c.get("scaling_efficiency_note")),
            *(f"{c['key']} was {c['remeasured']}." for c in ranked(results) if c.get("remeasured"))]


MEMORY_MEANS = {
    "cuda": "CUDA's max allocated",
    "cpu_tensors": "the bytes of CPU tensors at their highest over the profiled steps (torch's profiler counts each "
                   "allocation and free), CUDA's max allocated on a CPU; DDP's gradient buckets, which only C++ "
                   "holds, are counted from DDP's own report; Horovod's fusion buffer is not in it",
    "rss_above_start": "the RSS high-water mark above each rank's Session start (the method, model, optimizer "
                       "state and activations; the interpreter and its imports left out)",
    "rss": "the whole process's RSS high-water mark, imports included",
}


def _memory_footnote(results: dict[str, Any]) -> list[str]:
    """What "peak mem/rank" measured, for the kinds in this run (it differs between GPUs, CPUs and Keras cells)."""
    kinds = sorted({c.get("peak_mem_kind") or "rss" for c in results["cells"] if c.get("peak_mem_bytes")})
    return [f"peak mem/rank: {'; '.join(f'{k}: {MEMORY_MEANS.get(k, k)}' for k in kinds)}."] if kinds else []


EFF_COLUMN = COLUMNS.index("scaling eff")


def results_table(results: dict[str, Any]) -> Table:
    """The comparison as a rich Table, fastest first, the winner starred, non-equivalent losses in red, unreliable
    efficiencies in yellow with their reasons in the caption."""
    note_efficiencies(results)
    winner, ref = _winner_key(results), results.get("reference")
    caption = "\n".join([_caption(results), *_efficiency_footnotes(results), *_memory_footnote(results)])
    table = Table(title=f"paratrain compare — {escape(str(results.get('id', '')))}", title_justify="left",
                  caption=escape(caption), caption_justify="left", header_style="bold")
    for name in COLUMNS:
        table.add_column(escape(name), justify="left" if name in ("method", "status") else "right")
    for cell in ranked(results):
        cols = [escape(v) for v in _row(cell, winner, ref)]
        if is_flagged(cell):
            cols[-1] = f"[bold red]{cols[-1]}[/]"
        if cell.get("scaling_efficiency_note"):
            cols[EFF_COLUMN] = f"[yellow]{cols[EFF_COLUMN]}[/]"
        if cell["key"] == winner:
            cols[0] = f"[bold green]{cols[0]}[/]"
        word, why = _status(cell)
        colour = {"ok": "green", "unavailable": "yellow", "does not fit": "yellow", "ok, DISTURBED": "yellow"}.get(
            word, "red")
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
        if is_flagged(cell):
            cols[-1] = f"**{cols[-1]} NOT EQUIVALENT**"
        word, why = _status(cell)
        cols.append(word + (f": {why}" if why else ""))
        out.append(_md_row(cols))
    notes = "".join(f"\n\n{line}" for line in [*_efficiency_footnotes(results), *_memory_footnote(results)])
    return "\n".join(out) + f"\n\n{_caption(results)}{notes}\n"


def reproduce_command(results: dict[str, Any]) -> str:
    """The ``paratrain compare`` command line that repeats this run's settings."""
    s = results.get("settings") or {}
    cmd = ["paratrain", "compare"]
    if s.get("workload"):
        cmd += ["--model" if str(s["workload"]).startswith("hf:") else "--workload", s["workload"]]
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
    mode = s.get("activation_checkpointing")  # true in results written before checkpointing had modes: full
    if mode:
        cmd += ["--activation-checkpointing"] + ([] if mode in (True, "full") else [str(mode)])
    if s.get("memory_per_rank") is not None:
        cmd += ["--memory-per-rank", f"{s['memory_per_rank']:g}"]
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
            *_budget_md(results),
            f"- CPU threads: {_threads_text(results)}"]


def _budget_md(results: dict[str, Any]) -> list[str]:
    from paratrain.bench.budget import gib

    budget = results.get("memory_budget")
    return [f"- Memory budget: {gib(budget['bytes'])} per rank ({budget['source']})"] if budget else []


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


def _memory_md(results: dict[str, Any]) -> list[str]:
    from paratrain.bench.budget import memory_markdown

    lines = memory_markdown(results)
    return ["## Memory per rank", "", *lines, ""] if lines else []


def _report_md(results: dict[str, Any], plots: list[Path] | None) -> str:
    rec = results["recommendation"]
    parts = [f"# paratrain compare — {results.get('id')}", "",
             f"Created {results.get('created')} with paratrain {results.get('paratrain')}.", "",
             "## Settings", "", *_settings_md(results), "", "## Environment", "", *_env_md(results), "",
             "## Results", "", results_markdown(results), "## Where the time goes", "",
             *breakdown_markdown(results), "", *_memory_md(results), "## Recommendation", "",
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
    row.update(peak_mem_bytes_max=rank_max(cell.get("peak_mem_bytes")),
               state_bytes_max=rank_max(cell.get("state_bytes")),
               equivalent=None if cell.get("loss_max_abs_diff") is None else not is_flagged(cell),
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
        sa, sb = throughput(x) if x else None, throughput(y) if y else None
        rows.append({"key": key, "samples_per_s_a": sa, "samples_per_s_b": sb,
                     "ratio": sb / sa if sa and sb is not None else None,
                     "step_median_s_a": x.get("step_time_median_s"), "step_median_s_b": y.get("step_time_median_s"),
                     "peak_mem_bytes_a": rank_max(x.get("peak_mem_bytes")),
                     "peak_mem_bytes_b": rank_max(y.get("peak_mem_bytes")),
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
