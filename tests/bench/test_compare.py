"""`paratrain compare` end to end: real cells launched through `paratrain run` on CPU/gloo."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from paratrain.bench.compare import CompareSettings, plan_cells
from paratrain.errors import ConfigError
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain

pytestmark = pytest.mark.multiprocess
PNG = b"\x89PNG\r\n\x1a\n"


def test_failing_cell_is_isolated_with_reason_and_log(tmp_path):
    """A method that fails on this machine (FSDP's CPU offload needs a GPU) fails its own cells, with the reason and
    the log, and the comparison goes on. (The cells that finish are checked on `make demo`'s compare:
    tests/cli/test_demo.py.)"""
    proc = check(paratrain("compare", "--strategies", "single,fsdp:offload=cpu", "--nproc", "1,2", "--steps", "6",
                           "--warmup", "2", "--out", str(tmp_path / "out"), "--json", timeout=400))
    results = json.loads(proc.stdout)
    failed = [c for c in results["cells"] if c["strategy"] == "fsdp:offload=cpu"]
    assert [c["status"] for c in failed] == ["failed", "failed"]
    assert all("offload=cpu needs a GPU" in c["error"] for c in failed)
    assert all(c["log"] and Path(c["log"]).read_text() for c in failed)
    assert results["recommendation"]["winner"] == "single×1"
    assert "offload=cpu needs a GPU" in (tmp_path / "out" / "report.md").read_text()  # the report says why


def test_sweep_reports_the_winner_at_each_size(tmp_path):
    check(paratrain("compare", "--strategies", "single,dp", "--nproc", "1", "--steps", "12", "--warmup", "2",
                    "--sweep", "width=16,256", "--out", str(tmp_path / "sw"), "--db", str(tmp_path / "h.db"),
                    timeout=400))
    summary = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [p["value"] for p in summary["points"]] == [16, 256]
    assert all(p["winner"] in {"single×1", "dp×1"} for p in summary["points"])
    assert summary["points"][0]["param_count"] < summary["points"][1]["param_count"]
    assert summary["summary"].startswith(("The winner changes", "The same method wins"))
    assert (tmp_path / "sw" / "sweep.png").read_bytes()[:8] == PNG
    assert (tmp_path / "sw" / "width-16" / "report.md").is_file() and (tmp_path / "sw" / "width-256").is_dir()
    with sqlite3.connect(tmp_path / "h.db") as db:
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)


def test_users_own_script_is_measured_from_outside(tmp_path):
    proc = check(paratrain("compare", "--script", str(SESSION_TRAIN), "--script-args", "--steps 20",
                           "--strategies", "single,ddp", "--nproc", "2", "--warmup", "2",
                           "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json", timeout=300))
    cells = {c["key"]: c for c in json.loads(proc.stdout)["cells"]}
    assert set(cells) == {"single×1", "ddp×2"}
    assert all(c["status"] == "ok" and len(c["losses"]) == 20 for c in cells.values())
    assert cells["ddp×2"]["loss_max_abs_diff"] <= 1e-5
    assert cells["single×1"]["comm_bytes_per_step"] == 0 and cells["single×1"]["breakdown"]["comm_exposed_s"] == 0


def test_a_ported_script_gets_its_wall_time_per_epoch_and_its_validation_metrics(tmp_path):
    """examples/port_cnn.py evaluates after each epoch: the epoch's wall time includes that, the step times do not."""
    proc = check(paratrain("compare", "--script", str(ROOT / "examples" / "port_cnn.py"), "--script-args",
                           "--epochs 2 --ckpt-dir none", "--strategies", "single", "--nproc", "1", "--warmup", "2",
                           "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json", timeout=300))
    cell = json.loads(proc.stdout)["cells"][0]
    assert cell["status"] == "ok" and cell["epochs_done"] == 2, cell
    steps_per_epoch = cell["steps_done"] // 2
    assert cell["epoch_wall_s"] > 0.8 * steps_per_epoch * cell["step_time_median_s"]
    assert set(cell["extra"]) == {"val_loss", "val_acc"} and cell["extra"]["val_acc"] > 0.8
    assert "epoch s" in (tmp_path / "out" / "report.md").read_text()


def test_script_cells_are_isolated_and_take_steps_and_weak_scaling(tmp_path):
    script = ROOT / "tests" / "helpers" / "scripts" / "own_checkpoint.py"
    proc = check(paratrain("compare", "--script", str(script), "--strategies", "single,ddp", "--nproc", "2",
                           "--steps", "14", "--warmup", "2", "--scaling", "weak", "--out", str(tmp_path / "out"),
                           "--db", str(tmp_path / "h.db"), "--json", cwd=tmp_path, timeout=300))
    cells = {c["key"]: c for c in json.loads(proc.stdout)["cells"]}
    # Each cell trained its full --steps (not 40, and not 0 after finding the earlier cell's checkpoint).
    assert {k: (c["status"], c["steps_done"]) for k, c in cells.items()} == {
        "single×1": ("ok", 14), "ddp×2": ("ok", 14)}
    assert not (tmp_path / "ckpt").exists()  # nothing written where compare was started
    assert all(c["extra"] == {"val_acc": 0.6} for c in cells.values())  # session.log: the last value, step 10
    losses = cells["single×1"]["losses"]
    assert cells["single×1"]["final_loss"] == pytest.approx(losses[-1])  # 14 steps: a tenth is one step
    # Weak scaling: each of ddp×2's ranks trains on the loader's whole batch (16), not half of it.
    ranks = tmp_path / "out" / "cells" / "ddp_2" / "run1" / "metrics" / "rank0.jsonl"
    first = next(json.loads(line) for line in ranks.read_text().splitlines() if line.startswith('{"step"'))
    assert first["samples"] == 16
    report = (tmp_path / "out" / "report.md").read_text()
    assert "global batch the script’s loader" in report and "- Steps: 14" in report


def test_precision_applies_to_every_cell_and_the_report_says_so(tmp_path):
    proc = check(paratrain("compare", "--strategies", "single,ddp", "--nproc", "2", "--steps", "12", "--warmup", "2",
                           "--precision", "bf16-mixed", "--out", str(tmp_path / "out"), "--db",
                           str(tmp_path / "h.db"), "--json", timeout=300))
    results = json.loads(proc.stdout)
    cells = {c["key"]: c for c in results["cells"]}
    assert results["settings"]["precision"] == "bf16-mixed" and results["tolerance"] == 1e-2
    assert 1e-5 < cells["ddp×2"]["loss_max_abs_diff"] <= 1e-2  # rounded differently, and still the same training
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- Precision: bf16-mixed" in report and "--precision bf16-mixed" in report
    recommendation = report.split("## Recommendation")[1].split("## ")[0]
    assert "NOT EQUIVALENT" not in recommendation and "ddp×2" in recommendation


def test_the_checkpointing_mode_reaches_every_cell():
    """compare hands its mode to each cell's `paratrain run`, spelled once (True and "none" as the options read it)."""
    from paratrain.bench.compare import _run_flags

    assert _run_flags(CompareSettings(activation_checkpointing="op")) == ["--activation-checkpointing", "op"]
    assert CompareSettings(activation_checkpointing=True).activation_checkpointing == "full"
    assert CompareSettings(activation_checkpointing="none").activation_checkpointing is False
    assert _run_flags(CompareSettings()) == []
    with pytest.raises(ConfigError, match="not a mode"):
        CompareSettings(activation_checkpointing="every:0")


def test_bad_requests_are_refused_before_running(tmp_path):
    with pytest.raises(ConfigError, match="none of the requested methods can run here"):
        plan_cells(CompareSettings(strategies=["mirrored"], workload="cnn"))  # the cnn has no Keras twin
    with pytest.raises(ConfigError, match="leaves no measured steps"):
        CompareSettings(steps=5, warmup=5)
    (tmp_path / "mine.txt").write_text("keep")
    proc = paratrain("compare", "--out", str(tmp_path), "--steps", "10")
    assert proc.returncode == 2 and "refusing to write into it" in proc.stderr
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_ctrl_c_stops_the_running_cell_and_keeps_finished_ones(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from tests.helpers.launch import ROOT, worker_env

    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "compare", "--strategies", "single,ddp",
                             "--nproc", "1", "--steps", "40", "--warmup", "2", "--out", str(out), "--db",
                             str(tmp_path / "h.db"), "--json"], cwd=ROOT, env=worker_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = out / "cells" / "ddp_1" / "run1" / "log.txt"
    deadline = time.monotonic() + 120
    while not second.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert second.exists(), "the second cell never started"
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    results = json.loads((out / "results.json").read_text())
    assert results["interrupted"] is True
    assert [c["key"] for c in results["cells"]] == ["single×1"] and results["cells"][0]["status"] == "ok"
    time.sleep(1)
    leftovers = []
    for p in psutil.process_iter():
        try:
            if str(out) in p.environ().get("PARATRAIN_METRICS", ""):
                leftovers.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    assert not leftovers, f"processes of the interrupted cell are still running: {leftovers}"


def test_reusing_an_output_folder_measures_afresh(tmp_path):
    args = ("compare", "--strategies", "single", "--nproc", "1", "--steps", "8", "--warmup", "2",
            "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json")
    first = json.loads(check(paratrain(*args, timeout=200)).stdout)
    second = json.loads(check(paratrain(*args, timeout=200)).stdout)
    for results in (first, second):
        (cell,) = results["cells"]
        assert cell["status"] == "ok" and len(cell["losses"]) == 8
    assert first["id"] != second["id"] or first["created"] == second["created"]
