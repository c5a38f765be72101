"""The pictures of a comparison, one PNG each: throughput, step-time spread, memory per rank, loss curves (here),
and the time breakdown and scaling curves (plots_explain.py).

Why these four: throughput says which is fastest, the step-time boxes say whether that speed is steady (a wide box
is a noisy neighbour or a straggler rank), memory says what fits, and overlaid loss curves show at a glance that the
methods train the same model (they should lie on top of each other). matplotlib is optional
(``pip install "paratrain[plots]"``): it is imported only when a plot is drawn, with the file-only Agg backend so
plotting works on a headless server; a missing matplotlib raises ImportError, which the report turns into a note.

Readable at any number of cells: each figure widens with its x positions, and :func:`_layout` measures the drawn
labels and wraps or turns upright the x tick labels, and turns upright the bar values, where they would overlap
(``_*_figure`` return the laid-out Figure, so tests can measure what is saved).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratrain.bench.report import tolerance

MIB = 1 << 20
FIGSIZE = (8.0, 4.5)
SLOT_IN = 0.5  # inches per x position beyond the default width: room for an upright key and its bars
MAX_WIDTH_IN = 24.0  # wider PNGs stop being viewable in a report
VALUE = "value"  # gid of the number drawn over a bar
GAP_PX = 2.0  # labels closer than this read as touching
CROWDED_LEGEND = 6  # more entries than this: the legend goes beside the axes, where it hides no curve


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in results.get("cells") or [] if c.get("status") == "ok"]


def _width(slots: int, base: float = FIGSIZE[0]) -> float:
    """The figure width for ``slots`` x positions: ``base`` while they fit, then wider, capped."""
    return min(max(base, 2.0 + SLOT_IN * slots), MAX_WIDTH_IN)


def _save(fig: Any, plt: Any, path: Path) -> Path:
    """Write the laid-out figure (see :func:`_layout`) and close it, also when writing fails."""
    try:
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def _clash(a: Any, b: Any) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > -GAP_PX and min(a.y1, b.y1) - max(a.y0, b.y0) > -GAP_PX


def _overlapping(texts: list[Any], renderer: Any) -> bool:
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]
    return any(_clash(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _values(ax: Any) -> list[Any]:
    return [t for t in ax.texts if t.get_gid() == VALUE and t.get_text()]


def _headroom(ax: Any, renderer: Any) -> None:
    """Raise the y limit so every bar value fits under the top of the axes (upright ones are tall)."""
    height = ax.get_window_extent(renderer).height
    bottom, top = ax.get_ylim()
    need = [(t.xy[1] - bottom) / (1 - (t.get_window_extent(renderer).height + 3 * GAP_PX + 3) / height)
            for t in _values(ax) if t.get_window_extent(renderer).height < height / 2]
    if need and max(need) + bottom > top:
        ax.set_ylim(bottom, bottom + max(need))


def _hide_clashes(texts: list[Any], renderer: Any) -> None:
    """Last resort: drop a value that would cover one already shown; the bar height still says it."""
    shown: list[Any] = []
    for t in texts:
        box = t.get_window_extent(renderer)
        if any(_clash(box, s) for s in shown):
            t.set_visible(False)
        else:
            shown.append(box)


def _fit_ticks(ax: Any, renderer: Any) -> bool:
    """One step toward x tick labels that do not overlap: method options onto a second line (``deepspeed:`` /
    ``zero1×2``), then upright on one line. True when it changed something."""
    labels = ax.get_xticklabels()
    if not _overlapping(labels, renderer) or labels[0].get_rotation() == 90:
        return False
    texts = [t.get_text() for t in labels]
    if any(":" in t and "\n" not in t for t in texts):
        ax.set_xticks(ax.get_xticks(), [t.replace(":", ":\n", 1) for t in texts])
    else:
        ax.set_xticks(ax.get_xticks(), [t.replace(":\n", ":") for t in texts], rotation=90)
    return True


def _fit_values(ax: Any, renderer: Any) -> bool:
    """One step toward bar values that do not overlap: upright, then smaller, then leave out those that still
    would. True when it changed something."""
    values = _values(ax)
    if not _overlapping(values, renderer):
        return False
    if values[0].get_rotation() != 90:
        for t in values:
            t.set_rotation(90)
    elif values[0].get_fontsize() > 6:
        for t in values:
            t.set_fontsize(6)
    else:
        _hide_clashes(values, renderer)
    return True


def _layout(fig: Any) -> Any:
    """tight_layout, then fit the labels, measured on the drawn figure rather than guessed from the number of cells
    (so it holds for any key length): step by step until nothing overlaps, then room on the y axis for the values."""
    renderer = fig.canvas.get_renderer()
    for _ in range(6):
        fig.tight_layout()
        fig.canvas.draw()
        changed = [(_fit_ticks(ax, renderer), _fit_values(ax, renderer)) for ax in fig.axes]
        if not any(any(pair) for pair in changed):
            break
    for ax in fig.axes:
        _headroom(ax, renderer)
    fig.tight_layout()
    return fig


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _value(ax: Any, x: float, height: float) -> None:
    """The number over a bar (none for a missing one), tagged so :func:`_layout` can fit it."""
    text = f"{height:,.0f}" if height >= 100 else (f"{height:.3g}" if height else "")
    ax.annotate(text, (x, height), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                gid=VALUE)


def _legend(ax: Any) -> None:
    """Outside the axes, on the right: inside, it covers bars once there are many."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


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
                _value(ax, x, h)
    for bars in drawn.values():  # centred over the group's bars: it stands for all of them
        _value(ax, sum(x for x, _ in bars) / len(bars), max(h for _, h in bars))
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        _legend(ax)


def _throughput_figure(results: dict[str, Any]) -> Any:
    cells = [c for c in _ok_cells(results) if c.get("samples_per_s") is not None]
    strategies = list(dict.fromkeys(c.get("strategy") or c["key"] for c in cells))
    series: dict[str, dict[str, float]] = {}
    for c in sorted(cells, key=lambda c: c.get("nproc") or 0):
        series.setdefault(f"{c.get('nproc')} proc", {})[c.get("strategy") or c["key"]] = c["samples_per_s"]
    fig, ax = _pyplot().subplots(figsize=(_width(len(strategies) * max(1, len(series)) // 2), FIGSIZE[1]))
    if cells:
        _grouped_bars(ax, strategies, series, "samples/s")
    else:
        _empty(ax, "no method finished")
    ax.set_title("Throughput (higher is better)")
    return _layout(fig)


def plot_throughput(results: dict[str, Any], out_dir: Path) -> Path:
    """Samples/s per method (x), one bar per world size: does adding processes help, and which method gains most."""
    return _save(_throughput_figure(results), _pyplot(), Path(out_dir) / "throughput.png")


def _step_times_figure(results: dict[str, Any]) -> Any:
    cells = [c for c in _ok_cells(results) if c.get("step_times_s")]
    fig, ax = _pyplot().subplots(figsize=(_width(len(cells)), FIGSIZE[1]))
    if cells:
        ax.boxplot([[t * 1e3 for t in c["step_times_s"]] for c in cells], showfliers=True)
        ax.set_xticks(range(1, len(cells) + 1), [c["key"] for c in cells])
        ax.set_ylabel("step time (ms)")
    else:
        _empty(ax, "no step times recorded")
    ax.set_title("Step time after warm-up (lower is better)")
    return _layout(fig)


def plot_step_times(results: dict[str, Any], out_dir: Path) -> Path:
    """One box per cell of its post-warm-up step times (ms): the spread shows stragglers and noise."""
    return _save(_step_times_figure(results), _pyplot(), Path(out_dir) / "step_times.png")


def _per_rank(cells: list[dict[str, Any]], field: str) -> dict[str, dict[str, float]]:
    series: dict[str, dict[str, float]] = {}
    for c in cells:
        for rank, value in enumerate(c.get(field) or []):
            series.setdefault(f"rank {rank}", {})[c["key"]] = value / MIB
    return series


STACK_MEMORY = 6  # more cells than this: the two memory panels go one above the other, each the full width


def _memory_figure(results: dict[str, Any]) -> Any:
    cells = _ok_cells(results)
    keys = [c["key"] for c in cells]
    if len(keys) > STACK_MEMORY:
        fig, axes = _pyplot().subplots(2, 1, figsize=(_width(len(keys)), FIGSIZE[1] * 1.8), sharex=True)
    else:
        fig, axes = _pyplot().subplots(1, 2, figsize=(FIGSIZE[0] * 1.5, FIGSIZE[1]))
    kinds = sorted({c.get("peak_mem_kind") or "rss" for c in cells}) or ["rss"]
    for ax, field, title in ((axes[0], "peak_mem_bytes", f"Peak memory per rank ({'/'.join(kinds)})"),
                             (axes[1], "state_bytes", "Model state per rank (params+grads+optimizer)")):
        series = _per_rank(cells, field)
        if series:
            _grouped_bars(ax, keys, series, "MiB (numbers: max over ranks)" if len(series) > 1 else "MiB",
                          per_group=True)
        else:
            _empty(ax, "not measured")
        ax.set_title(title)
    return _layout(fig)


def plot_memory(results: dict[str, Any], out_dir: Path) -> Path:
    """Peak memory per rank (RSS or CUDA) and the model state (params+grads+optimizer) each rank holds, side by side,
    or one above the other when there are many cells."""
    return _save(_memory_figure(results), _pyplot(), Path(out_dir) / "memory.png")


def _label(cell: dict[str, Any], ref: str | None) -> str:
    diff = cell.get("loss_max_abs_diff")
    if cell["key"] == ref:
        return f"{cell['key']} (ref)"
    verdict = cell.get("equivalence")
    if verdict == "within_noise":
        return f"{cell['key']} (within noise, mean |Δ| {cell['loss_mean_abs_diff']:.1e})"
    flagged = verdict == "not_equivalent" if verdict else diff is not None and diff > tolerance(cell)
    return cell["key"] + (f" (NOT EQUIVALENT, max |Δ| {diff:.1e})" if flagged else "")


def plot_loss_curves(results: dict[str, Any], out_dir: Path) -> Path:
    """Every ok cell's loss per step on one axis; equivalent methods coincide, so a visible second curve is a bug."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    cells = [c for c in _ok_cells(results) if c.get("losses")]
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
        _legend(ax) if len(cells) > CROWDED_LEGEND else ax.legend(fontsize=8)
    else:
        _empty(ax, "no loss curves recorded")
    ax.set_title("Loss per step (exactly equivalent methods coincide)")
    return _save(_layout(fig), plt, Path(out_dir) / "loss_curves.png")


PLOTS: tuple[Callable[[dict[str, Any], Path], Path], ...] = (plot_throughput, plot_step_times, plot_memory,
                                                             plot_loss_curves)


def plot_all(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Draw every plot into ``out_dir`` (created if needed); raises ImportError when matplotlib is missing."""
    from paratrain.bench.plots_explain import plot_breakdown, plot_scaling, world_sizes

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [plot(results, out_dir) for plot in PLOTS]
    paths.append(plot_breakdown(results, out_dir))
    if len(world_sizes(results)) > 1:
        paths.append(plot_scaling(results, out_dir))
    return paths
