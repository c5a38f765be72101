"""What every plot of a comparison shares: matplotlib loaded on demand, the figure size, and the layout pass that
keeps labels readable at any number of cells.

Why a module of its own: plots.py and plots_explain.py (and the sweep's plot) draw different pictures with the same
helpers; here, below all of them, none of them has to import another. matplotlib is optional
(``pip install "paratrain[plots]"``): :func:`pyplot` imports it only when a plot is drawn, with the file-only Agg
backend so plotting works on a headless server; a missing matplotlib raises ImportError, which the report turns into
a note.

Readable at any number of cells: each figure widens with its x positions (:func:`fig_width`), and :func:`layout`
measures the drawn labels and wraps or turns upright the x tick labels, and turns upright the bar values, where they
would overlap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FIGSIZE = (8.0, 4.5)
SLOT_IN = 0.5  # inches per x position beyond the default width: room for an upright key and its bars
MAX_WIDTH_IN = 24.0  # wider PNGs stop being viewable in a report
VALUE = "value"  # gid of the number drawn over a bar
GAP_PX = 2.0  # labels closer than this read as touching


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, imported here and only now: plotting is optional and headless."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def ok_cells(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The cells that finished: only they have numbers to draw."""
    return [c for c in results.get("cells") or [] if c.get("status") == "ok"]


def fig_width(slots: int, base: float = FIGSIZE[0]) -> float:
    """The figure width for ``slots`` x positions: ``base`` while they fit, then wider, capped."""
    return min(max(base, 2.0 + SLOT_IN * slots), MAX_WIDTH_IN)


def save(fig: Any, plt: Any, path: Path) -> Path:
    """Write the laid-out figure (see :func:`layout`) and close it, also when writing fails."""
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


def layout(fig: Any) -> Any:
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


def empty(ax: Any, text: str) -> None:
    """Say why a panel has nothing to show, instead of leaving blank axes that read as zero."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def bar_value(ax: Any, x: float, height: float) -> None:
    """The number over a bar (none for a missing one), tagged so :func:`layout` can fit it."""
    text = f"{height:,.0f}" if height >= 100 else (f"{height:.3g}" if height else "")
    ax.annotate(text, (x, height), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7,
                gid=VALUE)


def legend(ax: Any) -> None:
    """Outside the axes, on the right: inside, it covers bars once there are many."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
