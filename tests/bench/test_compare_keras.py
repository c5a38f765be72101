"""compare's Keras cells: the mlp's Keras twin next to the torch cells, in the same table, checked across frameworks."""

from __future__ import annotations

import json

import pytest

from paratrain.bench.compare import CompareSettings, default_strategies, plan_cells
from paratrain.bench.finalize import reference_cell
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


def test_a_script_is_compared_by_the_methods_of_its_framework():
    keras = plan_cells(CompareSettings(workload=None, script=str(ROOT / "examples" / "keras_train.py"), nproc=[1, 2]))
    assert [c.key for c in keras] == ["horovod×1", "horovod×2", "mirrored×1", "mirrored×2", "multiworker×1",
                                      "multiworker×2"]  # Horovod runs Keras scripts too (its Keras binding)
    assert {c.framework for c in keras} == {"tensorflow"}
    assert default_strategies("tensorflow") == ["horovod", "mirrored", "multiworker"]
    torch = plan_cells(CompareSettings(workload=None, script=str(ROOT / "examples" / "session_train.py"), nproc=[2]))
    assert not any(c.strategy in ("mirrored", "multiworker") for c in torch)


def test_the_reference_is_one_process_on_one_device_of_either_framework():
    def cell(strategy, nproc, framework="tensorflow"):
        return {"key": f"{strategy}×{nproc}", "strategy": strategy, "nproc": nproc, "framework": framework}

    keras = [cell("multiworker", 1), cell("multiworker", 2), cell("mirrored", 1), cell("mirrored", 2)]
    assert reference_cell(keras)["key"] == "mirrored×1"  # whatever order the methods were asked in
    both = [cell("ddp", 1, "torch"), cell("mirrored", 1), cell("single", 1, "torch")]
    assert reference_cell(both)["key"] == "single×1"
    assert reference_cell(both[:2])["key"] == "ddp×1"  # a torch run without single: as before
    assert reference_cell([cell("multiworker", 2)]) is None


@requires("tensorflow", "tf_keras", "horovod")
@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_keras_script_is_compared_against_mirrored_on_one_process(tmp_path):
    script = str(ROOT / "examples" / "keras_train.py")
    proc = check(paratrain("compare", "--script", script, "--script-args", "--epochs 2 --samples 1024 --width 16",
                           "--nproc", "1", "--steps", "12", "--warmup", "2", "--out", str(tmp_path / "out"),
                           "--db", str(tmp_path / "h.db"), "--json", timeout=400))
    results = json.loads(proc.stdout)
    assert results["settings"]["strategies"] == ["horovod", "mirrored", "multiworker"]
    assert [(c["key"], c["status"]) for c in results["cells"]] == [("horovod×1", "ok"), ("mirrored×1", "ok"),
                                                                   ("multiworker×1", "ok")]
    assert results["reference"] == "mirrored×1"
    horovod = results["cells"][0]  # Horovod's Keras binding on one process trains what mirrored×1 does
    assert horovod["framework"] == "tensorflow" and horovod["loss_max_abs_diff"] <= 1e-6, horovod
    lines = results["recommendation"]["lines"]
    winner = results["recommendation"]["winner"]
    assert lines[0].startswith(f"Use {winner}: "), lines
    if winner != "mirrored×1":  # measured faster than the reference beyond the noise: said against it
        assert "mirrored×1 throughput" in lines[0], lines
    assert not any("single" in line for line in lines), lines  # no torch method named, none listed unavailable


@requires("tensorflow", "tf_keras", "horovod")
@pytest.mark.slow
@pytest.mark.multiprocess
def test_horovod_on_a_keras_script_trains_what_one_process_does(tmp_path):
    """Horovod's Keras binding in compare: two ranks, each on its half of every batch, against one process (which
    trains what mirrored×1 does: the test above)."""
    script = str(ROOT / "examples" / "keras_train.py")
    proc = check(paratrain("compare", "--script", script, "--script-args", "--epochs 2 --samples 1024 --width 16",
                           "--strategies", "horovod", "--nproc", "1,2", "--steps", "12", "--warmup", "2",
                           "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json", timeout=400))
    results = json.loads(proc.stdout)
    cells = {c["key"]: c for c in results["cells"]}
    assert results["reference"] == "horovod×1"
    assert all(c["status"] == "ok" and c["framework"] == "tensorflow" for c in cells.values()), cells
    # per-step losses are recovered from Keras' running means in float32: the report's tolerance, not bit-equality
    assert cells["horovod×2"]["loss_max_abs_diff"] <= 1e-5
    (one,) = cells["horovod×1"]["state_bytes"]  # per rank
    # each rank holds a whole replica (the wrapped optimizer's scalar bookkeeping may differ by a few bytes)
    assert one > 0 and all(abs(b - one) <= 0.01 * one for b in cells["horovod×2"]["state_bytes"])
    assert len(cells["horovod×2"]["state_bytes"]) == 2
