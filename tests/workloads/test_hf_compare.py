"""A Hugging Face model through `paratrain compare`, end to end: a local config given by a relative path from another
folder (``--model hf:…``) trains the one-process curve under the methods that take the model apart: fsdp and zero3
(deferred init, activation checkpointing on transformers' kwargs-only decoder layers, tied embeddings, rotary tables
outside the state dict). ddp and horovod only hook gradients, which the conformance suite covers for any model. The
bundled ``llama`` workload is the same code path; tests/bench/test_compare_budget.py runs it."""

from __future__ import annotations

import json

import pytest

from tests.helpers.launch import ROOT, check, paratrain
from tests.helpers.requirements import requires

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, requires("transformers", "deepspeed")]
CONFIG = ROOT / "tests" / "helpers" / "hf_configs" / "tiny-qwen2" / "config.json"  # Qwen2: qkv biases, tied
METHODS = ("fsdp", "deepspeed:zero3")


@pytest.mark.timeout(900)
def test_the_sharding_methods_train_an_hf_configs_one_process_curve(tmp_path):
    proc = check(paratrain("compare", "--model", "hf:hf_configs/tiny-qwen2", "--strategies",
                           ",".join(("single", *METHODS)), "--nproc", "2", "--steps", "8", "--warmup", "2",
                           "--activation-checkpointing", "--out", str(tmp_path / "out"), "--json",
                           cwd=CONFIG.parents[2], timeout=900))
    results = json.loads(proc.stdout)
    assert results["settings"]["workload"] == f"hf:{CONFIG}"  # the relative path, made absolute for every cell
    assert results["id"].startswith("compare-hf-tiny-qwen2-")
    cells = {c["key"]: c for c in results["cells"]}
    assert results["reference"] == "single×1" and cells["single×1"]["status"] == "ok", cells["single×1"]["error"]
    for method in METHODS:
        cell = cells[f"{method}×2"]
        assert cell["status"] == "ok", (method, cell["error"])
        assert cell["equivalence"] == "exact", (method, cell["equivalence_reason"])
        assert cell["loss_max_abs_diff"] <= 1e-5, (method, cell["loss_max_abs_diff"])
    assert f"paratrain compare --model hf:{CONFIG}" in (tmp_path / "out" / "report.md").read_text()


def test_compare_refuses_a_preset_or_a_hub_name_in_one_line(tmp_path):
    for model, words in (("llama3-8b", "must be a Hugging Face config: hf:PATH/config.json"),
                         ("hf:meta-llama/Llama-3.1-8B", "paratrain does not download models")):
        proc = paratrain("compare", "--model", model, "--out", str(tmp_path / "out"), cwd=tmp_path, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], lines
        assert not (tmp_path / "out").exists()
