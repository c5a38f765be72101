"""``paratrain history`` and ``paratrain report`` through the real entry point, on a synthetic history database."""

from __future__ import annotations

import json

import pytest

from paratrain.bench import store
from paratrain.bench.report import write_outputs
from paratrain.cli.main import main
from tests.bench.sample_results import sample_results

A, B = "compare-20261202-154000", "compare-20261203-100000"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")  # rich reads it per print: no wrapped cells in assertions
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)  # the default runs/<id>-report/ lands here


@pytest.fixture()
def db(tmp_path):
    """Two runs: A (its folder was deleted) and B (its report folder still exists), B twice as fast on ddp×2."""
    path = tmp_path / "history.db"
    store.save_run(sample_results(), tmp_path / "gone", path)
    b = sample_results({"ddp×2": {"samples_per_s": 3800.0}}, id=B, created="2026-12-03T10:00:00+00:00")
    write_outputs(b, tmp_path / "b-out")
    store.save_run(b, tmp_path / "b-out", path)
    return path


def _error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paratrain: error:"), lines
    return lines[0]


def test_history_table_and_json(db, capsys):
    assert main(["history", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert text.index(B) < text.index(A) and "ddp×2" in text and "mlp" in text
    assert main(["history", "--db", str(db), "--json", "--limit", "1"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in runs] == [B] and runs[0]["winner"] == "ddp×2"


def test_history_without_any_runs_yet(capsys):
    assert main(["history"]) == 0
    assert "No runs recorded yet" in capsys.readouterr().out
    assert main(["history", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_missing_db_is_a_one_line_error(capsys, tmp_path):
    assert main(["history", "--db", str(tmp_path / "nope.db")]) == 2
    assert "no run history at" in _error_line(capsys)


def test_report_rerenders_into_the_stored_folder(db, capsys, tmp_path):
    (tmp_path / "b-out" / "report.md").write_text("stale")
    assert main(["report", "latest", "--db", str(db)]) == 0
    text = capsys.readouterr().out
    assert "★ ddp×2" in text and "• Use ddp×2: 3,800 samples/s, 3.8× single×1 throughput" in text
    assert "NOT EQUIVALENT" in text
    assert "**NOT EQUIVALENT**" in (tmp_path / "b-out" / "report.md").read_text()


def test_report_default_folder_when_the_run_folder_is_gone(db, capsys, tmp_path):
    assert main(["report", "compare-20261202", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["id"] == A and data["recommendation"]["winner"] == "ddp×2"
    assert data["out_dir"] == f"runs/{A}-report"
    assert (tmp_path / "runs" / f"{A}-report" / "results.csv").is_file()
    assert json.loads((tmp_path / data["files"]["json"]).read_text())["id"] == A


def test_report_refuses_a_folder_that_is_not_a_report(db, capsys, tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("mine")
    assert main(["report", "-1", "--db", str(db), "--out", str(precious)]) == 2
    assert "refusing to overwrite" in _error_line(capsys)
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]


def test_unknown_run_and_unknown_option(db, capsys):
    assert main(["report", "compare-2026", "--db", str(db)]) == 2
    assert "matches 2 runs" in _error_line(capsys)
    assert main(["report", "bogus", "--db", str(db)]) == 2
    assert "paratrain history" in _error_line(capsys)
    assert main(["report", "latest", "--bogus", "--db", str(db)]) == 2
    assert "no such option: --bogus" in _error_line(capsys)


def test_report_two_runs_prints_the_diff_and_writes_diff_md(db, capsys, tmp_path):
    assert main(["report", A, B, "--db", str(db), "--out", str(tmp_path / "d")]) == 0
    text = capsys.readouterr().out
    assert "2.00×" in text and f"A = {A}" in text
    assert "| ddp×2 | 1,900.0 | 3,800.0 | 2.00× |" in (tmp_path / "d" / "diff.md").read_text()
    assert main(["report", A, B, "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["key"]: r["ratio"] for r in data["cells"]}["ddp×2"] == 2.0 and data["file"] is None


def test_help_explains_the_commands(capsys):
    assert main(["report", "--help"]) == 0
    text = capsys.readouterr().out
    assert "Re-render a past comparison, or compare two" in text and "--out" in text


def test_history_ids_survive_a_narrow_terminal_and_work_in_report(monkeypatch, capsys, tmp_path):
    """What `history` prints in an 80-column terminal is an id (or unique prefix) `report` accepts, for every run."""
    ids = ["compare-mlp-20261202-154000", "compare-mlp-20261202-154001", "compare-script-20261203-100000"]
    path = tmp_path / "narrow.db"
    for i, run_id in enumerate(ids):
        deep = tmp_path / ("a-rather-long-folder-name-" * 3) / run_id  # a wide out-dir column competes for room
        store.save_run(sample_results(id=run_id, created=f"2026-12-0{i + 1}T10:00:00+00:00"), deep, path)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["history", "--db", str(path)]) == 0
    text = capsys.readouterr().out
    assert "give it, or a unique prefix of it, to `paratrain report`" in text
    first_cells = [line.split("│")[1].strip() for line in text.splitlines() if line.count("│") > 2]
    printed = [cell for cell in first_cells if cell and cell != "run id"]
    assert sorted(printed) == sorted(ids), text
    for run_id in printed:
        assert main(["report", run_id, "--db", str(path), "--json", "--out", str(tmp_path / run_id)]) == 0
        assert json.loads(capsys.readouterr().out)["id"] == run_id


def test_report_takes_a_unique_prefix_and_names_the_ambiguous_matches(db, capsys, tmp_path):
    assert main(["report", "compare-20261203", "--db", str(db), "--json", "--out", str(tmp_path / "p")]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == B
    assert main(["report", "compare-2026120", "--db", str(db)]) == 2
    line = _error_line(capsys)
    assert f"matches 2 runs: {B}, {A}" in line and "type more of the id" in line
    assert main(["report", "zzz", "--db", str(db)]) == 2
    assert "no run 'zzz' in" in _error_line(capsys)
