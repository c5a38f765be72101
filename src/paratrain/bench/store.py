"""The run history: every ``paratrain compare`` result in one sqlite file, so runs can be listed, re-rendered and
compared later (``paratrain history``, ``paratrain report RUN [RUN2]``) even after the run folder is deleted.

Why sqlite: it ships with Python, one file holds everything, and concurrent writers are handled by the database,
not by us. The full results dict is stored as JSON; the other columns only make ``history`` fast to list. The file
lives at ``--db``, else ``$PARATRAIN_HOME/history.db``, else ``~/.paratrain/history.db``.
"""

from __future__ import annotations

import difflib
import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from paratrain.distenv import HOME_VAR
from paratrain.errors import ParatrainError

SCHEMA = ("CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created TEXT, workload TEXT, script TEXT, "
          "strategies TEXT, nproc TEXT, winner TEXT, out_dir TEXT, results TEXT)")
SHOWN_MATCHES = 5  # an ambiguous prefix's error names this many matches, so it stays one line
LIST_COLUMNS = ("id", "created", "workload", "script", "strategies", "nproc", "winner", "out_dir")


def default_db_path() -> Path:
    """``$PARATRAIN_HOME/history.db`` if the variable is set, else ``~/.paratrain/history.db``."""
    home = os.environ.get(HOME_VAR)
    return (Path(home).expanduser() if home else Path.home() / ".paratrain") / "history.db"


def _path(db: str | Path | None) -> Path:
    return Path(db).expanduser() if db is not None else default_db_path()


@contextmanager
def _connect(db: str | Path | None, *, create: bool) -> Iterator[sqlite3.Connection]:
    """An open connection that is always closed, committed on success and rolled back on error.

    Reading never creates a file: a missing database is a ParatrainError that says how one gets made.
    """
    path = _path(db)
    if not create and not path.is_file():
        raise ParatrainError(f"no run history at {path}",
                             hint="run `paratrain compare` first, or pass the right file with --db")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with closing(sqlite3.connect(path)) as conn:
            conn.row_factory = sqlite3.Row
            with conn:
                conn.execute(SCHEMA)
                yield conn
    except sqlite3.DatabaseError as exc:
        raise ParatrainError(f"{path} is not a readable paratrain history database ({exc})",
                             hint="pass another file with --db, or move this one away") from exc


def save_run(results: dict[str, Any], out_dir: str | Path, db: str | Path | None = None) -> Path:
    """Record (or replace, by id) one run; returns the database path. The winner comes from
    ``results["recommendation"]``, computed here if the report has not filled it in yet."""
    rec = results.get("recommendation")
    if not isinstance(rec, dict):
        from paratrain.bench.recommend import recommend

        rec = recommend(results)
    settings = results.get("settings") or {}
    row = (results["id"], results.get("created"), settings.get("workload"), settings.get("script"),
           ",".join(settings.get("strategies") or []), ",".join(map(str, settings.get("nproc") or [])),
           rec.get("winner"), str(Path(out_dir).resolve()), json.dumps(results, default=str))
    with _connect(db, create=True) as conn:
        conn.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    return _path(db)


def list_runs(db: str | Path | None = None, limit: int = 20) -> list[dict[str, Any]]:
    """The newest ``limit`` runs, newest first, without their full results (see :func:`load_run`)."""
    with _connect(db, create=False) as conn:
        rows = conn.execute(f"SELECT {', '.join(LIST_COLUMNS)} FROM runs ORDER BY created DESC, rowid DESC LIMIT ?",
                            (limit,)).fetchall()
    return [dict(r) for r in rows]


def _all_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM runs ORDER BY created DESC, rowid DESC")]


def _resolve(conn: sqlite3.Connection, run_id: str, path: Path) -> str:
    ids = _all_ids(conn)
    if not ids:
        raise ParatrainError(f"the run history at {path} is empty", hint="run `paratrain compare` first")
    wanted = run_id.strip()
    back = 1 if wanted == "latest" else (int(wanted[1:]) if wanted[:1] == "-" and wanted[1:].isdigit() else None)
    if back is not None:
        if not 1 <= back <= len(ids):
            raise ParatrainError(f"run {wanted} does not exist: the history holds {len(ids)} run(s)",
                                 hint="list them with `paratrain history`")
        return ids[back - 1]
    if wanted in ids:
        return wanted
    matches = [i for i in ids if i.startswith(wanted)] if wanted else []
    if len(matches) == 1:
        return matches[0]
    if matches:
        shown = ", ".join(matches[:SHOWN_MATCHES]) + (f" and {len(matches) - SHOWN_MATCHES} more"
                                                     if len(matches) > SHOWN_MATCHES else "")
        raise ParatrainError(f"run id prefix {wanted!r} matches {len(matches)} runs: {shown}",
                             hint="type more of the id")
    close = difflib.get_close_matches(wanted, ids, n=3, cutoff=0.4)
    near = f"; closest: {', '.join(close)}" if close else f"; newest: {', '.join(ids[:3])}"
    raise ParatrainError(f"no run {wanted!r} in {path}{near}",
                         hint="list runs with `paratrain history`, or use `latest`")


def find_run(run_id: str, db: str | Path | None = None) -> dict[str, Any]:
    """The history row of one run, with ``results`` parsed: by full id, unique prefix, ``latest`` or ``-N``
    (the N-th newest, ``-1`` = latest). An unknown id is a ParatrainError naming the closest ids."""
    with _connect(db, create=False) as conn:
        key = _resolve(conn, run_id, _path(db))
        row = dict(conn.execute("SELECT * FROM runs WHERE id = ?", (key,)).fetchone())
    row["results"] = json.loads(row["results"])
    return row


def load_run(run_id: str, db: str | Path | None = None) -> dict[str, Any]:
    """The results dict of one run (same lookup rules as :func:`find_run`)."""
    return find_run(run_id, db)["results"]
