"""A method added as a plug-in (tests/helpers/toy_method.py: one file, no paratrain source touched) is everywhere a
user looks — strategies, advise, run, compare — and passes the equivalence every method passes."""

from __future__ import annotations

import json

import pytest

from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain, worker_env

pytestmark = pytest.mark.multiprocess
PLUGIN = worker_env(PARATRAIN_PLUGINS="tests.helpers.toy_method", PYTHONPATH=str(ROOT))


def test_it_is_listed_planned_and_ranked():
    listed = json.loads(check(paratrain("strategies", "--json", env=PLUGIN)).stdout)
    assert "toy" in [row["name"] for row in listed]
    plan = json.loads(check(paratrain("run", "-s", "toy", "-n", "2", "--dry-run", "--json", str(SESSION_TRAIN),
                                      env=PLUGIN)).stdout)
    assert plan["launcher"] == "torchrun" and plan["world_size"] == 2
    advice = json.loads(check(paratrain("advise", "--params", "1e9", "--gpus", "8", "--gpu-mem", "80", "--json",
                                        env=PLUGIN)).stdout)
    assert "toy" in [row["method"] for row in advice["methods"]]
    assert "toy" not in check(paratrain("strategies")).stdout  # without the plug-in, nothing of it remains


def test_a_missing_plugin_is_one_line():
    proc = paratrain("strategies", env=worker_env(PARATRAIN_PLUGINS="no_such_plugin_module"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "PARATRAIN_PLUGINS names no_such_plugin_module" in proc.stderr


# Its training numbers, accumulation and checkpoints: the conformance suite (test_conformance.py) runs it.
def test_compare_measures_it_and_checks_its_equivalence(tmp_path):
    check(paratrain("compare", "-w", "mlp", "-s", "single,toy", "-n", "2", "--steps", "20", "--warmup", "2",
                    "--out", str(tmp_path / "out"), "--db", str(tmp_path / "h.db"), "--json", env=PLUGIN,
                    timeout=600))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    toy = next(c for c in results["cells"] if c["strategy"] == "toy")
    assert toy["status"] == "ok", toy
    assert toy["equivalence"] == "exact", toy["equivalence_reason"]
    # a plug-in's cells are measured like the built-in ones: the tensors' peak, at least the state each rank holds
    assert toy["peak_mem_kind"] == "cpu_tensors", toy["peak_mem_kind"]
    assert all(peak >= held > 0 for peak, held in zip(toy["peak_mem_bytes"], toy["state_bytes"], strict=True))
