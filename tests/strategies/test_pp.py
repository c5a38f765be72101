"""pp: consecutive blocks per rank, the batch streamed through in micro-batches. The conformance suite
(tests/strategies/test_conformance.py) runs both schedules on examples/session_train.py's nn.Sequential; here what
only pp has: the hand-written script, the bundled and Hugging Face transformers over 100 steps, a checkpoint from
another method, evaluation through the stages, and the models and scripts it refuses."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch import nn

from paratrain import pipeline_split
from paratrain.errors import ConfigError
from paratrain.workloads import get
from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import EXAMPLES, ROOT, check, paratrain

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
CASES = SCRIPTS / "pp_cases.py"


@pytest.mark.multiprocess
def test_the_handwritten_script_runs_unchanged_with_the_one_process_result(tmp_path, reference):
    check(paratrain("run", "-s", "pp", "-n", "2", str(EXAMPLES / "handwritten" / "pp.py"), "--steps", "200",
                    "--out", str(tmp_path)))
    assert_equivalent(reference("sgd"), tmp_path)


@pytest.mark.multiprocess
def test_a_ddp_checkpoint_resumes_under_pp_on_the_one_process_curve(tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    train("ddp", 2, tmp_path / "first", "adamw", 30, "--save", str(ckpt))
    resumed = train("pp", 2, tmp_path / "resumed", "adamw", 60, "--load", str(ckpt))
    assert_equivalent(reference("adamw", steps=60), resumed, offset=30)


@pytest.mark.multiprocess
def test_the_bundled_gpt_trains_100_steps_on_the_one_process_curve_under_both_schedules(tmp_path):
    check(paratrain("compare", "-w", "gpt", "-s", "single,pp:1f1b,pp:gpipe", "--nproc", "2", "--steps", "100",
                    "--out", str(tmp_path), timeout=400))
    cells = {c["key"]: c for c in json.loads((tmp_path / "results.json").read_text())["cells"]}
    single = cells["single×1"]
    for key in ("pp:1f1b×2", "pp:gpipe×2"):
        pp = cells[key]
        assert pp["status"] == "ok" and pp["loss_max_abs_diff"] <= 1e-5, pp
        assert max(pp["state_bytes"]) < min(single["state_bytes"])  # each stage holds some blocks only
        assert pp["breakdown"]["bubble_s"] > 0  # the stages waited for each other, timed on its own
        assert set(pp["comm_bytes_by_kind"]) == {"send"}, pp["comm_bytes_by_kind"]  # point to point only
        assert pp["predicted_mem"]["activations"] < single["predicted_mem"]["activations"]


@pytest.mark.multiprocess
def test_a_hugging_face_llama_over_three_stages_with_an_uneven_last_batch(tmp_path):
    """4 blocks over 3 stages (2, 1, 1), batches of 10 (5 micro-batches of 2), evaluation through the stages; built
    inside session.init_module(), so the stages receive their parts (rotary tables included) from rank 0."""
    out = tmp_path / "pp"
    check(paratrain("run", "-s", "pp", "-n", "3", str(CASES), str(out), "llama", timeout=300))
    single = tmp_path / "single"
    check(paratrain("run", "-s", "single", str(CASES), str(single), "llama", timeout=300))
    a, b = (json.loads((folder / "result.json").read_text()) for folder in (single, out))
    assert max(abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True)) <= 1e-4  # 4e-6 measured
    assert abs(a["eval"] - b["eval"]) <= 1e-4 and a["keys"] == b["keys"]


@pytest.mark.multiprocess
def test_a_script_that_calls_the_model_to_train_is_one_line_pointing_at_train_step(tmp_path):
    proc = paratrain("run", "-s", "pp", "-n", "2", str(SCRIPTS / "options_train.py"), str(tmp_path), "2",
                     "--explicit")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "model(x) cannot train" in last and "session.train_step(x, y, loss_fn)" in last, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.multiprocess
def test_a_forward_that_calls_a_part_another_stage_holds_is_one_line_naming_it(tmp_path):
    proc = paratrain("run", "-s", "pp", "-n", "2", str(CASES), str(tmp_path), "noskip")
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert re.search(r"stage (0's forward called head|1's forward called embed), which another stage holds", last), \
        proc.stderr  # whichever stage fails first
    assert "Traceback" not in proc.stderr


def test_an_nn_sequential_and_the_bundled_gpt_are_cut_keeping_every_name():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))
    stage, _ = pipeline_split.stage_module(model, 1, 2)
    assert list(stage.state_dict()) == ["4.weight", "4.bias"]  # layers 3 (Tanh) and 4
    gpt = get("gpt").build(depth=3).model
    names = set(gpt.state_dict())
    first, removed = pipeline_split.stage_module(get("gpt").build(depth=3).model, 0, 2)
    last, _ = pipeline_split.stage_module(get("gpt").build(depth=3).model, 1, 2)
    assert removed == ["ln", "head"]
    assert set(first.state_dict()) | set(last.state_dict()) == names  # between them, the whole model, once
    assert not set(first.state_dict()) & set(last.state_dict())
    assert {k.split(".")[1] for k in first.state_dict() if k.startswith("blocks.")} == {"0", "1"}
    hidden = first(torch.zeros(2, 8, dtype=torch.long))  # the first stage hands hidden states on
    assert hidden.shape == (2, 8, 64) and last(hidden).shape[-1] == gpt.head.out_features


def test_models_it_cannot_cut_are_refused_by_name():
    class Flat(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(2, 2), nn.Linear(2, 2)

    with pytest.raises(ConfigError, match=r"cannot cut Flat into stages: it has no nn\.ModuleList of blocks"):
        pipeline_split.stage_module(Flat(), 0, 2)
    with pytest.raises(ConfigError, match="over 3 stages needs at least 3 blocks; TinyGPT has 2 in blocks"):
        pipeline_split.stage_module(get("gpt").build(depth=2).model, 0, 3)
    llama = get("llama").build().model
    llama.config.tie_word_embeddings = True
    with pytest.raises(ConfigError, match="shares the input embedding's weight"):
        pipeline_split.stage_module(llama, 0, 2)


def test_blocks_are_divided_evenly_with_the_extra_ones_first():
    assert pipeline_split.ranges(5, 2) == [range(0, 3), range(3, 5)]
    assert pipeline_split.ranges(4, 3) == [range(0, 2), range(2, 3), range(3, 4)]


def test_a_padding_mask_for_a_hugging_face_decoder_is_refused_in_one_line():
    stage, _ = pipeline_split.stage_module(get("llama").build().model, 0, 1)
    ids = torch.zeros(2, 8, dtype=torch.long)
    with pytest.raises(ConfigError, match=r"only one tensor passes between stages, so a padding mask"):
        stage(ids, torch.ones(2, 8))
    assert stage(ids).shape[:2] == (2, 8)  # token ids alone: the logits


def test_a_weight_two_stages_would_share_is_refused_by_name():
    """An output head tied to the embedding by hand: each stage would train its own copy."""
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(16, 8)
            self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
            self.head = nn.Linear(8, 16, bias=False)
            self.head.weight = self.embed.weight

    for stage in (0, 1):
        with pytest.raises(ConfigError, match=r"(embed\.weight and head\.weight|head\.weight and embed\.weight) "
                                              r"are one tensor \(tied\)"):
            pipeline_split.stage_module(Tied(), stage, 2)
    whole, _ = pipeline_split.stage_module(Tied(), 0, 1)  # one stage holds both uses
    assert whole.head.weight is whole.embed.weight


@pytest.mark.multiprocess
def test_inside_init_module_rank_1_only_ever_holds_its_stage(tmp_path):
    """A 385 MiB gpt: rank 1 builds shapes and receives its half (measured: 203 MiB above its start for a 192 MiB
    stage; built as usual, 392 MiB)."""
    check(paratrain("run", "-s", "pp", "-n", "2", str(CASES), str(tmp_path), "memory", timeout=300))
    rank1 = json.loads((tmp_path / "memory-rank1.json").read_text())
    assert rank1["stage"] <= 0.51 * rank1["whole"], rank1
    assert rank1["peak"] <= 1.15 * rank1["stage"], rank1
