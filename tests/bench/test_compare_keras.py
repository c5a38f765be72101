"""compare's Keras cells: the mlp's Keras twin next to the torch cells, in the same table, checked across frameworks."""

from __future__ import annotations

import json

import pytest

from paratrain.bench.compare import CompareSettings, default_strategies, plan_cells
from tests.helpers.launch import ROOT, check, paratrain
from tests.helpers.requirements import requires


def test_default_compare_plans_keras_cells_for_the_mlp_only():
    assert {"mirrored", "multiworker"} <= set(default_strategies())
    mlp = {c.key: c for c in plan_cells(CompareSettings(nproc=[1, 2]))}
    assert mlp["mirrored×2"].spec is not None and mlp["mirrored×2"].spec.script.endswith("train_keras.py")
    cnn = {c.key: c for c in plan_cells(CompareSettings(workload="cnn", nproc=[2]))}
    assert cnn["mirrored×2"].spec is None and "no Keras version of the cnn workload" in cnn["mirrored×2"].reason
    own = {c.key: c for c in plan_cells(CompareSettings(script=str(ROOT / "examples" / "session_train.py"),
                                                        strategies=["ddp", "multiworker"], nproc=[2]))}
    assert own["multiworker×2"].spec is None and "is a PyTorch (Session) script" in own["multiworker×2"].reason


@requires("tensorflow", "tf_keras")
@pytest.mark.slow
@pytest.mark.multiprocess
def test_keras_cells_train_the_same_as_torch(tmp_path):
    proc = check(paratrain("compare", "--strategies", "single,mirrored,multiworker", "--nproc", "2", "--steps", "30",
                           "--warmup", "2", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json",
                           timeout=400))
    results = json.loads(proc.stdout)
    cells = {c["key"]: c for c in results["cells"]}
    assert {"single×1", "mirrored×2", "multiworker×2"} <= set(cells)
    for key in ("mirrored×2", "multiworker×2"):
        cell = cells[key]
        assert cell["status"] == "ok" and cell["framework"] == "tensorflow" and len(cell["losses"]) == 30, cell
        assert cell["loss_max_abs_diff"] <= 1e-4 and cell["equivalence"] == "exact", cell["equivalence_reason"]
        assert cell["state_bytes"] and all(b > 0 for b in cell["state_bytes"])
    cross = results["cross_framework"]
    assert cross["same"] and cross["max_abs_diff"] <= 1e-4 and cross["reference"] == "single×1"
    assert "**PyTorch vs Keras**" in (tmp_path / "out" / "report.md").read_text()
