"""The two pictures that explain a comparison: where each cell's step time goes (stacked bars), and how each method
scales with the number of processes against the ideal line (when more than one world size was run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from paratrain.bench.explain import NOT_MEASURED, PARTS, comm_measured
from paratrain.bench.plot_base import FIGSIZE, empty, fig_width, layout, legend, ok_cells, pyplot, save
from paratrain.bench.recommend import efficiency_base, efficiency_note


def _breakdown_figure(results: dict[str, Any]) -> Any:
    cells = [c for c in ok_cells(results) if c.get("breakdown")]
    fig, ax = pyplot().subplots(figsize=(fig_width(len(cells)), FIGSIZE[1]))
    if cells:
        bottoms = [0.0] * len(cells)
        for key, label in PARTS:
            heights = [(c["breakdown"].get(key) or 0.0) * 1e3 for c in cells]
            ax.bar(range(len(cells)), heights, 0.6, bottom=bottoms, label=label)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
        for i, c in enumerate(cells):
            if not comm_measured(c):  # a zero-height "exposed comm" would read as no communication at all
                ax.annotate(f"comm {NOT_MEASURED}", (i, bottoms[i]), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(cells)), [c["key"] for c in cells])
        ax.set_ylabel("ms per step (median)")
        legend(ax)
    else:
        empty(ax, "no breakdown recorded")
    ax.set_title("Where each step's time goes")
    return layout(fig)


def plot_breakdown(results: dict[str, Any], out_dir: Path) -> Path:
    """One bar per cell, stacked: compute, exposed communication, data, optimizer, other (ms per step)."""
    return save(_breakdown_figure(results), pyplot(), Path(out_dir) / "breakdown.png")


def world_sizes(results: dict[str, Any]) -> list[int]:
    return sorted({c["nproc"] for c in ok_cells(results) if c.get("samples_per_s")})


def _mark_unreliable(ax: Any, cells: list[dict[str, Any]], colour: str) -> None:
    """Hollow rings around efficiencies the report calls unreliable (above 100 %, or a noisy base): a point
    drawn like the others would be read as a measurement."""
    ax.scatter([c["nproc"] for c in cells], [c["scaling_efficiency"] * 100 for c in cells], s=160,
               facecolors="none", edgecolors=colour, linewidths=1.5)
    for c in cells:
        ax.annotate("unreliable", (c["nproc"], c["scaling_efficiency"] * 100), xytext=(-10, -14),
                    textcoords="offset points", ha="right", fontsize=8, color=colour)


def _scaling_figure(results: dict[str, Any]) -> Any:
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(FIGSIZE[0] * 1.4, FIGSIZE[1]))
    cells = [c for c in ok_cells(results) if c.get("samples_per_s")]
    sizes = world_sizes(results)
    ref = next((c for c in cells if c["key"] == results.get("reference")), None)
    for method in dict.fromkeys(c["strategy"] for c in cells):
        mine = sorted((c for c in cells if c["strategy"] == method), key=lambda c: c["nproc"])
        if len(mine) < 2:
            continue
        left.plot([c["nproc"] for c in mine], [c["samples_per_s"] for c in mine], marker="o", label=method)
        effs = [(c["nproc"], c["scaling_efficiency"]) for c in mine if c.get("scaling_efficiency") is not None]
        line = right.plot([n for n, _ in effs], [e * 100 for _, e in effs], marker="o", label=method)[0]
        _mark_unreliable(right, [c for c in mine if efficiency_note(c, efficiency_base(c, results))],
                         line.get_color())
        over = [c for c in mine if c.get("oversubscribed")]
        left.scatter([c["nproc"] for c in over], [c["samples_per_s"] for c in over], marker="x", s=80, color="red",
                     label="oversubscribed" if over and method == cells[0]["strategy"] else None)
    if ref is not None and sizes:
        left.plot(sizes, [n * ref["samples_per_s"] for n in sizes], "k--", label=f"ideal (N × {ref['key']})")
    right.axhline(100, color="k", linestyle="--", label="ideal")
    left.set(xlabel="processes", ylabel="samples/s", xticks=sizes, title="Throughput")
    right.set(xlabel="processes", ylabel="scaling efficiency %", xticks=sizes, title="Efficiency")
    for ax in (left, right):
        ax.legend(fontsize=8)
    return layout(fig)


def plot_scaling(results: dict[str, Any], out_dir: Path) -> Path:
    """Throughput and scaling efficiency against world size, per method; the ideal is N × one process of it."""
    return save(_scaling_figure(results), pyplot(), Path(out_dir) / "scaling.png")
