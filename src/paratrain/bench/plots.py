"""The pictures of a comparison, one PNG each: throughput, step-time spread, memory per rank, loss curves (here),
and the time breakdown and scaling curves (plots_explain.py).

Why these four: throughput says which is fastest, the step-time boxes say whether that speed is steady (a wide box
is a noisy neighbour or a straggler rank), memory says what fits, and overlaid loss curves show at a glance that the
methods train the same model (they should lie on top of each other). matplotlib is optional
(``pip install "paratrain[plots]"``): it is imported only when a plot is drawn, with the file-only Agg backend so
plotting works on a headless server; a missing matplotlib raises ImportError, which the report turns into a note.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratrain.bench.report import tolerance

MIB = 1 << 20
FIGSIZE = (8.0, 4.5)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ok_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in results.get("cells") or [] if c.get("status") == "ok"]


def _save(fig: Any, plt: Any, path: Path) -> Path:
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _grouped_bars(ax: Any, groups: list[str], series: dict[str, dict[str, float]], ylabel: str) -> None:
    """Bars grouped by ``groups`` (x axis), one colour per series name; a missing value leaves a gap."""
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [values.get(group, 0.0) for group in groups]
        bars = ax.bar(xs, heights, width, label=name)
        ax.bar_label(bars, labels=[f"{h:,.0f}" if h >= 10 else (f"{h:.2g}" if h else "") for h in heights],
                     fontsize=7)
    ax.set_xticks(range(len(groups)), groups, rotation=15 if len(groups) > 4 else 0)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=8)


def plot_throughput(results: dict[str, Any], out_dir: Path) -> Path:
    """Samples/s per method (x), one bar per world size: does adding processes help, and which method gains most."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    cells = [c for c in _ok_cells(results) if c.get("samples_per_s") is not None]
    if cells:
        strategies = list(dict.fromkeys(c.get("strategy") or c["key"] for c in cells))
        series: dict[str, dict[str, float]] = {}
        for c in sorted(cells, key=lambda c: c.get("nproc") or 0):
            series.setdefault(f"{c.get('nproc')} proc", {})[c.get("strategy") or c["key"]] = c["samples_per_s"]
        _grouped_bars(ax, strategies, series, "samples/s")
    else:
        _empty(ax, "no method finished")
    ax.set_title("Throughput (higher is better)")
    return _save(fig, plt, Path(out_dir) / "throughput.png")


def plot_step_times(results: dict[str, Any], out_dir: Path) -> Path:
    """One box per cell of its post-warm-up step times (ms): the spread shows stragglers and noise."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    cells = [c for c in _ok_cells(results) if c.get("step_times_s")]
    if cells:
        ax.boxplot([[t * 1e3 for t in c["step_times_s"]] for c in cells], showfliers=True)
        ax.set_xticks(range(1, len(cells) + 1), [c["key"] for c in cells], rotation=15 if len(cells) > 4 else 0)
        ax.set_ylabel("step time (ms)")
    else:
        _empty(ax, "no step times recorded")
    ax.set_title("Step time after warm-up (lower is better)")
    return _save(fig, plt, Path(out_dir) / "step_times.png")


def _per_rank(cells: list[dict[str, Any]], field: str) -> dict[str, dict[str, float]]:
    series: dict[str, dict[str, float]] = {}
    for c in cells:
        for rank, value in enumerate(c.get(field) or []):
            series.setdefault(f"rank {rank}", {})[c["key"]] = value / MIB
    return series


def plot_memory(results: dict[str, Any], out_dir: Path) -> Path:
    """Left: peak memory per rank (RSS or CUDA); right: the model state (params+grads+optimizer) each rank holds."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(FIGSIZE[0] * 1.5, FIGSIZE[1]))
    cells = _ok_cells(results)
    keys = [c["key"] for c in cells]
    kinds = sorted({c.get("peak_mem_kind") or "rss" for c in cells}) or ["rss"]
    for ax, field, title in ((left, "peak_mem_bytes", f"Peak memory per rank ({'/'.join(kinds)})"),
                             (right, "state_bytes", "Model state per rank (params+grads+optimizer)")):
        series = _per_rank(cells, field)
        if series:
            _grouped_bars(ax, keys, series, "MiB")
        else:
            _empty(ax, "not measured")
        ax.set_title(title)
    return _save(fig, plt, Path(out_dir) / "memory.png")


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
        ax.legend(fontsize=8)
    else:
        _empty(ax, "no loss curves recorded")
    ax.set_title("Loss per step (exactly equivalent methods coincide)")
    return _save(fig, plt, Path(out_dir) / "loss_curves.png")


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
