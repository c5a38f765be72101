"""The pictures of a comparison, one PNG each: throughput, step-time spread, memory per rank, loss curves (here),
and the time breakdown and scaling curves (plots_explain.py).

Why these four: throughput says which is fastest, the step-time boxes say whether that speed is steady (a wide box
is a noisy neighbour or a straggler rank), memory says what fits, and overlaid loss curves show at a glance that the
methods train the same model (they should lie on top of each other). matplotlib is optional and loaded on demand,
and every figure is laid out so its labels do not overlap (plot_base.py; ``_*_figure`` return the laid-out Figure,
so tests can measure what is saved).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratrain.bench.plot_base import FIGSIZE, bar_value, empty, fig_width, layout, legend, ok_cells, pyplot, save
from paratrain.bench.plots_explain import plot_breakdown, plot_scaling, world_sizes
from paratrain.bench.recommend import MIB, is_flagged
from paratrain.metrics import MEMORY_KINDS

CROWDED_LEGEND = 6  # more entries than this: the legend goes beside the axes, where it hides no curve



def _grouped_bars(ax: Any, groups: list[str], series: dict[str, dict[str, float]], ylabel: str,
                  per_group: bool = False) -> None:
    """Bars grouped by ``groups`` (x axis), one colour per series name; a missing value leaves a gap. The values
    are written over every bar, or with ``per_group`` once per group, centred over its bars, at its tallest (the max
    over ranks, as the table shows it): four ranks' near-equal numbers side by side are clutter, not information."""
    width = 0.8 / max(len(series), 1)
    drawn: dict[int, list[tuple[float, float]]] = {}  # group → (x, height) of its bars
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [values.get(group, 0.0) for group in groups]
        ax.bar(xs, heights, width, label=name)
        for g, (x, h) in enumerate(zip(xs, heights, strict=True)):
            if per_group and h:
                drawn.setdefault(g, []).append((x, h))
            elif not per_group:
                bar_value(ax, x, h)
    for bars in drawn.values():  # centred over the group's bars: it stands for all of them
        bar_value(ax, sum(x for x, _ in bars) / len(bars), max(h for _, h in bars))
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        legend(ax)


def _throughput_figure(results: dict[str, Any]) -> Any:
    cells = [c for c in ok_cells(results) if c.get("samples_per_s") is not None]
    strategies = list(dict.fromkeys(c.get("strategy") or c["key"] for c in cells))
    series: dict[str, dict[str, float]] = {}
    for c in sorted(cells, key=lambda c: c.get("nproc") or 0):
        series.setdefault(f"{c.get('nproc')} proc", {})[c.get("strategy") or c["key"]] = c["samples_per_s"]
    fig, ax = pyplot().subplots(figsize=(fig_width(len(strategies) * max(1, len(series)) // 2), FIGSIZE[1]))
    if cells:
        _grouped_bars(ax, strategies, series, "samples/s")
    else:
        empty(ax, "no method finished")
    ax.set_title("Throughput (higher is better)")
    return layout(fig)


def plot_throughput(results: dict[str, Any], out_dir: Path) -> Path:
    """Samples/s per method (x), one bar per world size: does adding processes help, and which method gains most."""
    return save(_throughput_figure(results), pyplot(), Path(out_dir) / "throughput.png")


def _step_times_figure(results: dict[str, Any]) -> Any:
    cells = [c for c in ok_cells(results) if c.get("step_times_s")]
    fig, ax = pyplot().subplots(figsize=(fig_width(len(cells)), FIGSIZE[1]))
    if cells:
        ax.boxplot([[t * 1e3 for t in c["step_times_s"]] for c in cells], showfliers=True)
        ax.set_xticks(range(1, len(cells) + 1), [c["key"] for c in cells])
        ax.set_ylabel("step time (ms)")
    else:
        empty(ax, "no step times recorded")
    ax.set_title("Step time after warm-up (lower is better)")
    return layout(fig)


def plot_step_times(results: dict[str, Any], out_dir: Path) -> Path:
    """One box per cell of its post-warm-up step times (ms): the spread shows stragglers and noise."""
    return save(_step_times_figure(results), pyplot(), Path(out_dir) / "step_times.png")


def _per_rank(cells: list[dict[str, Any]], field: str) -> dict[str, dict[str, float]]:
    series: dict[str, dict[str, float]] = {}
    for c in cells:
        for rank, value in enumerate(c.get(field) or []):
            series.setdefault(f"rank {rank}", {})[c["key"]] = value / MIB
    return series


STACK_MEMORY = 6  # more cells than this: the two memory panels go one above the other, each the full width
# what a peak means, in words (compare falls back to the whole process's RSS where a rank reported none)
PEAK_WORDS = {**MEMORY_KINDS, "rss": "process RSS"}
# each cell's tick says which, when the cells measured different things (a Keras cell's RSS beside torch's tensors)
PEAK_TAGS = {"cuda": "CUDA", "cpu_tensors": "tensors", "rss_above_start": "RSS", "rss": "process RSS"}


def _memory_figure(results: dict[str, Any]) -> Any:
    cells = ok_cells(results)
    keys = [c["key"] for c in cells]
    if len(keys) > STACK_MEMORY:
        fig, axes = pyplot().subplots(2, 1, figsize=(fig_width(len(keys)), FIGSIZE[1] * 1.8), sharex=True)
    else:
        fig, axes = pyplot().subplots(1, 2, figsize=(FIGSIZE[0] * 1.5, FIGSIZE[1]))
    kinds = sorted({c.get("peak_mem_kind") or "rss" for c in cells}) or ["rss"]
    peak_title = f"Peak memory per rank ({PEAK_WORDS.get(kinds[0], kinds[0])})"
    tagged = None
    if len(kinds) > 1:  # not the same measure: the bars of different kinds must not be read against each other
        tagged = [f"{c['key']} [{PEAK_TAGS.get(c.get('peak_mem_kind') or 'rss', '?')}]" for c in cells]
        peak_title = ("Peak memory per rank, not comparable across kinds:\n"
                      + "; ".join(f"{PEAK_TAGS.get(k, k)}: {PEAK_WORDS.get(k, k)}" for k in kinds))
    for ax, field, title in ((axes[0], "peak_mem_bytes", peak_title),
                             (axes[1], "state_bytes", "Model state per rank (params+grads+optimizer)")):
        series = _per_rank(cells, field)
        if series:
            _grouped_bars(ax, keys, series, "MiB (numbers: max over ranks)" if len(series) > 1 else "MiB",
                          per_group=True)
        else:
            empty(ax, "not measured")
        ax.set_title(title)
        if tagged:
            ax.set_xticks(range(len(keys)), tagged)
    _budget_line(axes[0], results, cells)
    return layout(fig)


def _budget_line(ax: Any, results: dict[str, Any], cells: list[dict[str, Any]]) -> None:
    """The memory budget across the peaks, and "over by X" under each cell whose peak went above it."""
    from paratrain.bench.budget import Budget, gib, over_by

    budget = results.get("memory_budget")
    if not budget:
        return
    limit = Budget(int(budget["bytes"]), str(budget.get("source", "")))
    ax.axhline(limit.bytes / MIB, color="red", linestyle="--", linewidth=1, label=f"budget {gib(limit.bytes)}/rank")
    labels = [t.get_text() for t in ax.get_xticklabels()] or [c["key"] for c in cells]
    overs = [over_by(c, limit) for c in cells]
    if any(overs):
        ax.set_xticks(range(len(cells)), [f"{label}\nover by {gib(by)}" if by else label
                                         for label, by in zip(labels, overs, strict=True)])
    legend(ax)


def plot_memory(results: dict[str, Any], out_dir: Path) -> Path:
    """Peak memory per rank (RSS or CUDA) and the model state (params+grads+optimizer) each rank holds, side by side,
    or one above the other when there are many cells."""
    return save(_memory_figure(results), pyplot(), Path(out_dir) / "memory.png")


def _label(cell: dict[str, Any], ref: str | None) -> str:
    diff = cell.get("loss_max_abs_diff")
    if cell["key"] == ref:
        return f"{cell['key']} (ref)"
    verdict = cell.get("equivalence")
    if verdict == "within_noise":
        return f"{cell['key']} (within noise, mean |Δ| {cell['loss_mean_abs_diff']:.1e})"
    return cell["key"] + (f" (NOT EQUIVALENT, max |Δ| {diff:.1e})" if is_flagged(cell) else "")


def plot_loss_curves(results: dict[str, Any], out_dir: Path) -> Path:
    """Every ok cell's loss per step on one axis; equivalent methods coincide, so a visible second curve is a bug."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    cells = [c for c in ok_cells(results) if c.get("losses")]
    ref = results.get("reference")
    if cells:
        styles = ["-", "--", "-.", ":"]
        for i, c in enumerate(sorted(cells, key=lambda c: c["key"] != ref)):  # reference first, drawn underneath
            ax.plot(range(1, len(c["losses"]) + 1), c["losses"], styles[i % len(styles)],
                    linewidth=2.5 if c["key"] == ref else 1.2, label=_label(c, ref))
        if all(v > 0 for c in cells for v in c["losses"]):
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        legend(ax) if len(cells) > CROWDED_LEGEND else ax.legend(fontsize=8)
    else:
        empty(ax, "no loss curves recorded")
    ax.set_title("Loss per step (exactly equivalent methods coincide)")
    return save(layout(fig), plt, Path(out_dir) / "loss_curves.png")


PLOTS: tuple[Callable[[dict[str, Any], Path], Path], ...] = (plot_throughput, plot_step_times, plot_memory,
                                                             plot_loss_curves)


def plot_all(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw every plot into ``out_dir`` (created if needed); raises ImportError when matplotlib is missing."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot(results, out_dir) for plot in PLOTS]
    paths.append(plot_breakdown(results, out_dir))
    if len(world_sizes(results)) > 1:
        paths.append(plot_scaling(results, out_dir))
    return paths
