"""tp: each block's matrices split over the ranks by the model's plan. The conformance suite
(tests/strategies/test_conformance.py) runs it on examples/session_train.py's model and plan; here what only it has:
the hand-written script, plans found on the bundled and Hugging Face models, a checkpoint from another method, and
the models it cannot split."""

from __future__ import annotations

import json

import pytest
from torch import nn

from paratrain.advise import models
from paratrain.errors import ConfigError
from paratrain.strategies.tp import check_divides, check_ties, find_plan
from paratrain.workloads import get
from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import EXAMPLES, ROOT, check, paratrain
from tests.helpers.memory import assert_state_is_advises

TRAIN = str(ROOT / "src" / "paratrain" / "workloads" / "train.py")


@pytest.mark.multiprocess
def test_the_handwritten_script_runs_unchanged_with_the_one_process_result(tmp_path, reference):
    check(paratrain("run", "-s", "tp", "-n", "2", str(EXAMPLES / "handwritten" / "tp.py"), "--steps", "200",
                    "--out", str(tmp_path)))
    assert_equivalent(reference("sgd"), tmp_path)


@pytest.mark.multiprocess
def test_a_ddp_checkpoint_resumes_under_tp_on_the_one_process_curve(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    train("ddp", 2, tmp_path / "first", "adamw", 30, "--save", str(ckpt))
    resumed = train("tp", 2, tmp_path / "resumed", "adamw", 60, "--load", str(ckpt))
    assert_equivalent(reference("adamw", steps=60), resumed, offset=30)


@pytest.mark.multiprocess
def test_a_hugging_face_llama_split_by_its_configs_plan_trains_the_one_process_curve(tmp_path):
    check(paratrain("compare", "-w", "llama", "-s", "single,tp", "--nproc", "2", "--steps", "30",
                    "--out", str(tmp_path), timeout=300))
    cells = {c["key"]: c for c in json.loads((tmp_path / "results.json").read_text())["cells"]}
    tp = cells["tp×2"]
    assert tp["status"] == "ok" and tp["loss_max_abs_diff"] <= 1e-5, tp
    assert max(tp["state_bytes"]) < min(cells["single×1"]["state_bytes"])  # each rank holds slices of the blocks
    assert_state_is_advises([tp], models.from_bundled("llama"), "adamw")  # advise's tensor-parallel state: exact
    assert tp["predicted_mem"]["activations"] < cells["single×1"]["predicted_mem"]["activations"]


@pytest.mark.multiprocess
def test_a_model_without_a_plan_is_one_line_naming_it():
    proc = paratrain("run", "-s", "tp", "-n", "2", TRAIN, "--workload", "mlp", "--steps", "2")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "--strategy tp cannot split Sequential: it declares no tensor-parallel plan" in last, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_bundled_models_and_a_transformers_config_bring_their_plans():
    gpt = get("gpt").build().model
    assert find_plan(gpt) == {f"blocks.{i}.{name}": style for i in range(2)
                              for name, style in (("qkv", "colwise"), ("proj", "rowwise"), ("mlp.0", "colwise"),
                                                  ("mlp.2", "rowwise"))}
    llama = get("llama").build().model  # the plan is its config's, under the base model's prefix
    plan = find_plan(llama)
    assert plan["model.layers.0.self_attn.q_proj"] == "colwise" and plan["model.layers.1.mlp.down_proj"] == "rowwise"
    assert "lm_head" not in plan and "model.embed_tokens" not in plan  # left whole on every rank
    check_divides(llama, plan, 2)


def test_a_split_that_would_cut_heads_or_features_unevenly_is_refused():
    gpt = get("gpt").build().model  # 4 heads
    with pytest.raises(ConfigError, match="would cut attention heads apart: TinyGPT has 4 attention heads"):
        check_divides(gpt, find_plan(gpt), 3)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
    model.tp_plan = {"0": "colwise", "2": "rowwise"}
    with pytest.raises(ConfigError, match=r"cannot split 0 evenly \(colwise, 6 features\)"):
        check_divides(model, find_plan(model), 4)


@pytest.mark.parametrize(("plan", "message"), [
    ({"1": "colwise"}, "matches 1, a Tanh: only nn.Linear layers are split"),
    ({"0": "sequence_parallel"}, '"sequence_parallel" is not one of colwise, rowwise'),
    ({"blocks.*.qkv": "colwise"}, "matches none of its modules"),
])
def test_a_plan_it_cannot_apply_is_one_clear_error(plan, message):
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    model.tp_plan = plan
    with pytest.raises(ConfigError, match=message):
        find_plan(model)


@pytest.mark.multiprocess
def test_tied_embeddings_stay_one_parameter_under_tp_and_fsdp_tp(tmp_path):
    """A config with tie_word_embeddings (Qwen2's): the output head and the input embedding are one parameter, kept
    whole on every rank and still one, so both methods train the one-process curve (untied, they were 0.6 off)."""
    config = ROOT / "tests" / "helpers" / "hf_configs" / "tiny-qwen2"
    check(paratrain("compare", "--model", f"hf:{config}", "-s", "single,tp,fsdp+tp", "--nproc", "2",
                    "--steps", "12", "--out", str(tmp_path), timeout=300))
    cells = {c["key"]: c for c in json.loads((tmp_path / "results.json").read_text())["cells"]}
    for key in ("tp×2", "fsdp+tp×2"):
        assert cells[key]["status"] == "ok" and cells[key]["loss_max_abs_diff"] <= 1e-5, cells[key]


def test_a_plan_that_splits_a_tied_layer_is_refused_naming_both():
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight

    with pytest.raises(ConfigError, match=r"cannot split head\.weight: it is tied to embed\.weight"):
        check_ties(Tied(), {"head": "colwise"})
    check_ties(Tied(), {})  # both kept whole: the tie stays, nothing to refuse
