"""The sqlite history: where it lives, what a row holds, how ids are looked up, and no connection left open."""

from __future__ import annotations

import sqlite3

import pytest

from paratrain.bench import store
from paratrain.errors import ParatrainError
from tests.bench.sample_results import sample_results

IDS = ["compare-20261201-090000", "compare-20261202-154000", "compare-20261202-180000"]


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "deep" / "dir" / "history.db"
    for i, run_id in enumerate(IDS):
        store.save_run(sample_results(id=run_id, created=f"2026-12-0{i + 1}T10:00:00+00:00"), tmp_path / run_id, path)
    return path


def test_default_db_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path / "home"))
    assert store.default_db_path() == tmp_path / "home" / "history.db"
    monkeypatch.delenv("PARATRAIN_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert store.default_db_path() == tmp_path / ".paratrain" / "history.db"


def test_save_creates_dirs_and_lists_newest_first(db, tmp_path):
    assert db.is_file()
    runs = store.list_runs(db)
    assert [r["id"] for r in runs] == IDS[::-1]
    assert runs[0]["winner"] == "ddp×2" and runs[0]["workload"] == "mlp" and runs[0]["nproc"] == "1,2"
    assert runs[0]["strategies"] == "single,ddp,fsdp,deepspeed:zero=2,horovod"
    assert runs[0]["out_dir"] == str((tmp_path / IDS[2]).resolve())
    assert [r["id"] for r in store.list_runs(db, limit=1)] == [IDS[2]]


def test_save_uses_default_path_and_replaces_same_id(monkeypatch, tmp_path):
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path / "home"))
    store.save_run(sample_results(), tmp_path)
    store.save_run(sample_results(recommendation={"winner": "single×1", "lines": []}), tmp_path)
    runs = store.list_runs()
    assert len(runs) == 1 and runs[0]["winner"] == "single×1"
    assert (tmp_path / "home" / "history.db").is_file()


@pytest.mark.parametrize(("wanted", "expected"), [
    (IDS[1], IDS[1]), ("compare-20261201", IDS[0]), ("latest", IDS[2]), ("-1", IDS[2]), ("-3", IDS[0]),
])
def test_lookup(db, wanted, expected):
    results = store.load_run(wanted, db)
    assert results["id"] == expected and results["cells"][2]["key"] == "ddp×2"


def test_ambiguous_prefix(db):
    with pytest.raises(ParatrainError, match="matches 2 runs"):
        store.load_run("compare-20261202", db)


def test_unknown_id_names_closest_and_history(db):
    with pytest.raises(ParatrainError) as info:
        store.load_run("compare-20261202-154001", db)
    text = info.value.one_line()
    assert "closest: compare-20261202-154000" in text and "paratrain history" in text
    with pytest.raises(ParatrainError, match="holds 3 run"):
        store.load_run("-4", db)


def test_missing_and_broken_db(tmp_path):
    with pytest.raises(ParatrainError, match="no run history at"):
        store.list_runs(tmp_path / "none.db")
    assert not (tmp_path / "none.db").exists()  # reading never creates the file
    junk = tmp_path / "junk.db"
    junk.write_text("not a database at all, just text " * 100)
    with pytest.raises(ParatrainError, match="not a readable paratrain history database"):
        store.load_run("latest", junk)


def test_every_connection_is_closed(db, monkeypatch):
    opened: list[Tracked] = []

    class Tracked(sqlite3.Connection):
        closed = False

        def close(self):
            self.closed = True
            super().close()

    real = sqlite3.connect

    def connect(path, *args, **kwargs):
        conn = real(path, *args, factory=Tracked, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(store.sqlite3, "connect", connect)
    store.save_run(sample_results(id="compare-x"), db.parent, db)
    store.list_runs(db)
    store.load_run("latest", db)
    with pytest.raises(ParatrainError):
        store.load_run("nope", db)
    assert len(opened) == 4 and all(c.closed for c in opened)


def test_an_ambiguous_prefix_names_its_matches_on_one_line(tmp_path):
    path = tmp_path / "history.db"
    many = [f"compare-mlp-20261202-1540{i:02d}" for i in range(8)]
    for i, run_id in enumerate(many):
        store.save_run(sample_results(id=run_id, created=f"2026-12-02T15:40:{i:02d}+00:00"), tmp_path, path)
    with pytest.raises(ParatrainError) as info:
        store.load_run("compare-mlp", path)
    text = info.value.one_line()
    assert "\n" not in text and "matches 8 runs" in text and "and 3 more" in text
    assert ", ".join(many[::-1][:5]) in text
    assert store.load_run("compare-mlp-20261202-154003", path)["id"] == many[3]
