"""``paratrain history`` and ``paratrain report``: look back at past comparisons without rerunning them.

Why: a comparison takes minutes and its numbers are only meaningful next to other runs (before/after a driver
update, a code change, another machine). Every ``paratrain compare`` is saved in the history database; these
commands list it, re-render one run's report (e.g. after installing matplotlib, or after the report format
improved) and put two runs side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from paratrain import console
from paratrain.cli._render import print_json
from paratrain.errors import ConfigError

HISTORY_HELP = (
    "List past `paratrain compare` runs, newest first: id, date, workload or script, methods, process counts, "
    "the recommended method and where the report was written.\n\n"
    "Ids are printed whole, whatever the terminal width. Pass one (or a unique prefix of it, `latest`, or -N for "
    "the N-th newest) to `paratrain report`."
)
REPORT_HELP = (
    "Re-render a past comparison, or compare two.\n\n"
    "With one RUN: print its results table and recommendation, and rewrite report.md, results.json, results.csv "
    "and the plots (into --out, else the run's own folder if it still exists, else runs/<id>-report/). A folder "
    "that is not empty and holds no results.json is never overwritten.\n\n"
    "With RUN2: print each method's throughput, step time, peak memory and status in both runs, and the speed "
    "ratio B/A (above 1: B is faster); --out also writes diff.md there."
)
ID_CAPTION = "run id: printed whole; give it, or a unique prefix of it, to `paratrain report`"
DB_HELP = "History database (default: $PARATRAIN_HOME/history.db, else ~/.paratrain/history.db)."


def history(
    db: Path = typer.Option(None, "--db", help=DB_HELP, show_default=False),
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="Show at most this many runs, newest first."),
    json_out: bool = typer.Option(False, "--json", help="Print the runs as a JSON list."),
) -> None:
    from paratrain.bench import store

    if db is None and not store.default_db_path().is_file():
        if json_out:
            print_json([])
        else:
            console.out.print(f"No runs recorded yet ({escape(str(store.default_db_path()))} does not exist); "
                      "run `paratrain compare` first.")
        return
    runs = store.list_runs(db, limit=limit)
    if json_out:
        print_json(runs)
        return
    if not runs:
        console.out.print("The run history is empty; run `paratrain compare` first.")
        return
    console.out.print(_history_table(runs))


def _history_table(runs: list[dict[str, Any]]) -> Table:
    """The runs as a table whose ids are always printed whole: they are what `paratrain report` takes, so a
    narrow terminal wraps or folds the other columns, never the id (a cut id would look like a prefix of another)."""
    table = Table(title="Past comparisons (newest first)", title_justify="left", header_style="bold",
                  caption=ID_CAPTION, caption_justify="left")
    table.add_column("run id", no_wrap=True, min_width=max(len(r["id"]) for r in runs))
    for col in ("created", "workload / script", "methods", "nproc", "winner", "out dir"):
        table.add_column(col, overflow="fold")  # folded, not cut with "…": a narrow terminal loses nothing
    for r in runs:
        winner = f"[green]{escape(r['winner'])}[/]" if r["winner"] else "[dim]none[/]"
        table.add_row(escape(r["id"]), escape(r["created"] or ""), escape(r["workload"] or r["script"] or "?"),
                      escape(r["strategies"] or ""), escape(r["nproc"] or ""), winner, escape(r["out_dir"] or ""))
    return table


def _check_writable(folder: Path) -> None:
    """Refuse to write into a folder that holds other things: we only ever overwrite our own reports."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--out {folder} is a file, not a folder", hint="pass a folder path with --out")
    if folder.is_dir() and any(folder.iterdir()) and not (folder / "results.json").is_file():
        raise ConfigError(f"{folder} is not empty and is not a paratrain report (no results.json); refusing to "
                          "overwrite it", hint="pass an empty or new folder with --out")


def _report_dir(row: dict[str, Any], out_dir: Path | None) -> Path:
    if out_dir is not None:
        return out_dir
    stored = Path(row["out_dir"]) if row.get("out_dir") else None
    if stored is not None and stored.is_dir():
        return stored
    return Path("runs") / f"{row['id']}-report"


def _one(run: str, db: Path | None, out_dir: Path | None, json_out: bool) -> None:
    from paratrain.bench import store
    from paratrain.bench.report import results_table, write_outputs

    row = store.find_run(run, db)
    results = row["results"]
    folder = _report_dir(row, out_dir)
    _check_writable(folder)
    paths = write_outputs(results, folder)
    if json_out:
        print_json({"id": results["id"], "out_dir": str(folder), "files": {k: str(p) for k, p in paths.items()},
                    "recommendation": results["recommendation"], "results": results})
        return
    console.out.print(results_table(results))
    for line in results["recommendation"]["lines"]:
        console.out.print(f"• {escape(line)}")
    console.out.print(f"\nReport written to [bold]{escape(str(paths['report']))}[/]")


def _two(run: str, run2: str, db: Path | None, out_dir: Path | None, json_out: bool) -> None:
    from paratrain.bench import store
    from paratrain.bench.report import diff_markdown, diff_rows, diff_table

    a, b = store.load_run(run, db), store.load_run(run2, db)
    written = None
    if out_dir is not None:
        _check_writable(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        written = out_dir / "diff.md"
        written.write_text(diff_markdown(a, b), encoding="utf-8")
    if json_out:
        print_json({"a": a["id"], "b": b["id"], "cells": diff_rows(a, b),
                    "file": str(written) if written else None})
        return
    console.out.print(diff_table(a, b))
    if written:
        console.out.print(f"\nDiff written to [bold]{escape(str(written))}[/]")


def report(
    run: str = typer.Argument(..., metavar="RUN", help="Run id, a unique prefix of it, `latest` or -N."),
    run2: str = typer.Argument(None, metavar="RUN2", help="A second run: compare RUN (A) with it (B).",
                               show_default=False),
    db: Path = typer.Option(None, "--db", help=DB_HELP, show_default=False),
    out_dir: Path = typer.Option(None, "--out", "-o", show_default=False,
                                 help="Folder for the files (default: the run's folder if it still exists, "
                                 "else runs/<id>-report/). With RUN2: where diff.md goes (none without it)."),
    json_out: bool = typer.Option(False, "--json", help="Print machine-readable JSON only."),
) -> None:
    for arg in (run, run2):  # `-N` reaches here as an argument; anything else dash-led is a mistyped option
        if arg is not None and arg.startswith("-") and not arg[1:].isdigit():
            raise ConfigError(f"no such option: {arg}", hint="see `paratrain report --help`")
    if run2 is None:
        _one(run, db, out_dir, json_out)
    else:
        _two(run, run2, db, out_dir, json_out)


def register(app: typer.Typer) -> None:
    app.command("history", help=HISTORY_HELP)(history)
    # ignore_unknown_options lets `paratrain report -1` mean "the newest run" instead of an unknown option -1
    app.command("report", help=REPORT_HELP, context_settings={"ignore_unknown_options": True})(report)
