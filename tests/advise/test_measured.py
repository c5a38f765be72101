"""Measurements from the run history as advise uses them: a measured tie is called a tie, and a run on CPU (gloo)
is not evidence for a GPU plan. Real results dicts saved into a temporary history, advise through its entry point."""

from __future__ import annotations

import json

import pytest

from paratrain.advise import measured
from paratrain.bench import store
from paratrain.cli.main import main
from tests.bench.sample_results import sample_results

PARAMS = 1_000_000
PLAN = ["--params", "1e6", "--gpus", "2", "--gpu-mem", "8", "--precision", "fp32"]
GPU = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-0", "memory_total_mib": 81559, "visible": True}
GPU_ENV = {"python": "3.11.7", "torch": "2.13.0+cu124", "platform": "Linux-6.8.0-x86_64-with-glibc2.39",
           "hostname": "gpu-box", "cores": 32,
           "inventory": {"source": "nvml", "reason": None, "driver": "550.54", "cuda": "12.4",
                         "gpus": [GPU, {**GPU, "index": 1, "uuid": "GPU-1"}],
                         "cpu": {"cores": 32, "logical_cores": 64, "memory_gib": 503.0},
                         "visible": [0, 1], "topology": None}}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path / "home"))


def _results(run_id: str, day: int, *, gpu: bool, repeats: dict[str, list[float]] | None = None) -> dict:
    """A compare of the 1M-parameter model: fsdp×2 measured 1.95× single, ddp×2 1.80×, 8 % apart. ``repeats``:
    the per-repeat throughputs compare keeps for a cell (its run-to-run spread)."""
    speeds = {"single×1": 1000.0, "ddp×1": 980.0, "ddp×2": 1800.0, "fsdp×2": 1950.0}
    changes = {key: {"param_count": PARAMS, "samples_per_s": sps, "peak_mem_kind": "cuda" if gpu else "rss",
                     "repeat_samples_per_s": (repeats or {}).get(key, [sps])} for key, sps in speeds.items()}
    extra = {"env": GPU_ENV} if gpu else {}  # sample_results' own env is a GPU-less machine (torch +cpu, no GPUs)
    return sample_results(changes, id=run_id, created=f"2026-12-0{day}T10:00:00+00:00", **extra)


def _advise(capsys, db, *extra: str) -> dict:
    assert main(["advise", *PLAN, "--db", str(db), *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _measured(result: dict) -> dict:
    return {r["method"]: r["measured"] for r in result["methods"] if r["measured"]}


def test_a_difference_within_the_measured_spread_is_a_tie(capsys, tmp_path):
    db = tmp_path / "history.db"
    store.save_run(_results("compare-mlp-20261201-100000", 1, gpu=True,
                            repeats={"ddp×2": [1700.0, 1800.0, 1880.0]}), tmp_path / "a", db)  # ±10 % spread
    result = _advise(capsys, db)
    assert result["recommendation"][:2] == ["ddp", "fsdp"]  # fsdp measured faster, but not beyond the spread
    assert result["ties"] == [["ddp", "fsdp"]]
    line = result["notes"][0]
    assert line.startswith("ddp and fsdp tie on measurement (ddp×2 1.80×, fsdp×2 1.95× single, within the measured "
                           "spread, ±10 %; run compare-mlp-20261201-100000); ranked by less estimated time on the "
                           "link per step (ddp ≈"), line
    assert "a tie with fsdp×2 (±10 %)" in result["reasons"]["ddp"]
    assert main(["advise", *PLAN, "--db", str(db)]) == 0
    assert "ddp and fsdp tie on measurement" in capsys.readouterr().out


def test_a_difference_beyond_the_noise_ranks_by_measurement(capsys, tmp_path):
    db = tmp_path / "history.db"
    store.save_run(_results("compare-mlp-20261201-100000", 1, gpu=True), tmp_path / "a", db)  # one run each: ±5 %
    result = _advise(capsys, db)
    assert result["recommendation"][:2] == ["fsdp", "ddp"] and result["ties"] == [] and result["notes"] == []
    assert _measured(result)["fsdp"]["device"] == "gpu"


def test_cpu_measurements_are_not_evidence_for_a_gpu_plan(capsys, tmp_path):
    db = tmp_path / "history.db"
    store.save_run(_results("compare-mlp-20261202-100000", 2, gpu=False), tmp_path / "cpu", db)
    found = measured.measurements(PARAMS, world=2, db=db)
    assert {m["device"] for m in found.values()} == {"cpu"} and found["ddp"]["where"] == "CPU (gloo)"
    result = _advise(capsys, db)
    assert _measured(result) == {} and result["ties"] == []
    assert result["recommendation"] == _advise(capsys, tmp_path / "none.db")["recommendation"]  # estimates only
    assert result["notes"] == ["single×1, ddp×2, fsdp×2 measured on CPU (gloo) in run compare-mlp-20261202-100000: "
                               "not used for this GPU plan (ranked by estimates)."]
    assert {m["method"] for m in result["set_aside"]} == {"single", "ddp", "fsdp"}
    assert main(["advise", *PLAN, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "measured on CPU (gloo) in run compare-mlp-20261202-100000: not used" in out
    assert "measured: " not in out  # no CPU figure is shown as a reason


def test_an_older_gpu_run_beats_a_newer_cpu_run(capsys, tmp_path):
    db = tmp_path / "history.db"
    store.save_run(_results("compare-mlp-20261201-100000", 1, gpu=True), tmp_path / "gpu", db)
    store.save_run(_results("compare-mlp-20261202-100000", 2, gpu=False), tmp_path / "cpu", db)
    result = _advise(capsys, db)
    assert {m["run"] for m in _measured(result).values()} == {"compare-mlp-20261201-100000"}
    assert result["notes"] == [] and result["recommendation"][0] == "fsdp"
