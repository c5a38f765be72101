"""``compare --sweep width=64,128,256``: the same comparison at several model sizes, and where the winner changes.

This is the question the seed's choosing guide answers in prose ("one process for small models, DDP when compute
outweighs the all-reduce, sharding when it does not fit"): here each size is a full comparison (its own run in the
history), and the summary says which method won at each size and where that changed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from paratrain.errors import ConfigError

KEYS = ("width", "depth")


def parse(text: str) -> tuple[str, list[int]]:
    """``width=64,128,256`` -> ("width", [64, 128, 256])."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in KEYS:
        raise ConfigError(f'--sweep "{text}" must be KEY=V1,V2,... with KEY one of {", ".join(KEYS)}',
                          hint="e.g. --sweep width=64,128,256")
    try:
        numbers = [int(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f'--sweep "{text}": the values must be whole numbers') from None
    if len(numbers) < 2 or any(n < 1 for n in numbers):
        raise ConfigError(f'--sweep "{text}" needs two or more positive sizes')
    return key, numbers


def summarize(key: str, runs: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """Per size: the winner and every cell's throughput relative to that run's reference; then the crossovers."""
    points = []
    for value, results in runs:
        cells = [c for c in results.get("cells") or [] if c.get("status") == "ok" and c.get("samples_per_s")]
        ref = next((c for c in cells if c["key"] == results.get("reference")), None)
        rec = results.get("recommendation") or {}
        points.append({"value": value, "run": results.get("id"), "winner": rec.get("winner"),
                       "param_count": next((c.get("param_count") for c in cells if c.get("param_count")), None),
                       "speedup": {c["key"]: c["samples_per_s"] / ref["samples_per_s"] for c in cells} if ref else {}})
    changes = [f"{a['winner']} at {key} {a['value']} → {b['winner']} at {key} {b['value']}"
               for a, b in itertools.pairwise(points) if a["winner"] != b["winner"]]
    text = (f"The winner changes: {'; '.join(changes)}." if changes
            else f"The same method wins at every {key}: {points[0]['winner'] if points else 'none'}.")
    return {"key": key, "points": points, "crossovers": changes, "summary": text}


def write(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    """sweep.json, sweep.md and (with matplotlib) sweep.png in the sweep's folder."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "sweep.json", out_dir / "sweep.md"]
    paths[0].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    key = summary["key"]
    keys = list(dict.fromkeys(k for p in summary["points"] for k in p["speedup"]))
    lines = [f"# paratrain compare --sweep {key}", "", summary["summary"], "",
             "| " + " | ".join([key, "parameters", "winner", *[f"{k} ×single" for k in keys]]) + " |",
             "|" + "---|" * (3 + len(keys))]
    for p in summary["points"]:
        cols = [str(p["value"]), f"{p['param_count']:,}" if p["param_count"] else "—", str(p["winner"]),
                *[f"{p['speedup'][k]:.2f}" if k in p["speedup"] else "—" for k in keys]]
        lines.append("| " + " | ".join(cols) + " |")
    lines += ["", "Each size is a full comparison with its own report (sub-folders) and history row."]
    try:
        paths.append(_plot(summary, keys, out_dir / "sweep.png"))
        lines += ["", "![sweep](sweep.png)"]
    except ImportError:
        pass
    paths[1].write_text("\n".join(lines) + "\n", encoding="utf-8")
    return paths


def _plot(summary: dict[str, Any], keys: list[str], path: Path) -> Path:
    from paratrain.bench.plot_base import FIGSIZE, pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    xs = [p["value"] for p in summary["points"]]
    for k in keys:
        pts = [(p["value"], p["speedup"][k]) for p in summary["points"] if k in p["speedup"]]
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=k)
    for p in summary["points"]:
        if p["winner"] in p["speedup"]:
            ax.annotate("★", (p["value"], p["speedup"][p["winner"]]), ha="center", va="bottom", fontsize=12)
    ax.axhline(1.0, color="k", linestyle=":", linewidth=1)
    ax.set(xscale="log", xticks=xs, xlabel=summary["key"], ylabel="throughput ÷ single×1",
           title="Which method wins as the model grows (★ = winner)")
    ax.set_xticklabels([str(x) for x in xs])
    ax.legend(fontsize=8)
    return save(fig, plt, path)
