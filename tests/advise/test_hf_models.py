"""advise's Hugging Face configs (``--model hf:PATH``) and Llama 3 presets: parameter counts equal the published
ones exactly, the dimensions the activation formula needs are read right (grouped-query heads, SwiGLU or GELU,
RMSNorm or LayerNorm, experts per token), and nothing is ever downloaded.

The configs under tests/helpers/hf_configs/ carry the published architecture fields of each model (no weights)."""

from __future__ import annotations

import json
import os

import pytest

from paratrain.advise import memory, methods, models
from paratrain.cli.main import main
from paratrain.errors import ConfigError
from tests.helpers.launch import ROOT
from tests.helpers.requirements import requires

pytestmark = requires("transformers")
CONFIGS = ROOT / "tests" / "helpers" / "hf_configs"


# Published parameter counts (each model card's or paper's total, embeddings included).
@pytest.mark.parametrize(("folder", "params", "arch"), [
    ("llama-3.1-8b", 8_030_261_248, {"kv_heads": 8, "mlp": "swiglu", "norm": "rmsnorm", "vocab": 128256}),
    ("mistral-7b", 7_241_732_096, {"kv_heads": 8, "mlp": "swiglu", "norm": "rmsnorm", "vocab": 32000}),
    ("qwen2.5-7b", 7_615_616_512, {"kv_heads": 4, "mlp": "swiglu", "ffn": 18944, "vocab": 152064}),
    ("gpt2", 124_439_808, {"kv_heads": None, "mlp": "gelu", "norm": "layernorm", "ffn": 3072, "seq_len": 1024}),
    ("mixtral-8x7b", 46_702_792_704, {"experts": 2, "ffn": 14336, "mlp": "swiglu"}),
])
def test_a_local_config_is_counted_exactly_on_the_meta_device(folder, params, arch):
    spec = models.resolve(f"hf:{CONFIGS / folder / 'config.json'}", None)
    assert spec.params == params
    assert spec.shapes is not None and sum(1 for _ in spec.shapes) > 0
    for key, value in arch.items():
        assert getattr(spec.transformer, key) == value, (key, spec.transformer)


def test_the_folder_and_a_relative_path_name_the_same_config(monkeypatch):
    monkeypatch.chdir(CONFIGS)
    assert models.resolve("hf:gpt2", None).params == models.resolve("hf:./gpt2/config.json", None).params


def test_width_and_depth_resize_a_config_the_way_advise_and_compare_train_it():
    spec = models.resolve(f"hf:{CONFIGS / 'mistral-7b'}", None, width=128, depth=3)
    arch = spec.transformer
    assert (arch.hidden, arch.layers, arch.ffn, arch.kv_heads) == (128, 3, 448, 8)
    assert spec.params == 2 * 32000 * 128 + 3 * (2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 448 + 2 * 128) + 128
    with pytest.raises(ConfigError, match="--width 100 must be a positive multiple of 32"):
        models.resolve(f"hf:{CONFIGS / 'mistral-7b'}", None, width=100)


def test_a_hub_name_or_a_missing_file_is_one_line_and_nothing_is_fetched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ConfigError, match="paratrain does not download models") as hub:
        models.resolve("hf:meta-llama/Llama-3.1-8B", None)
    assert "huggingface-cli download meta-llama/Llama-3.1-8B config.json" in hub.value.hint
    with pytest.raises(ConfigError, match=f"no such file {tmp_path / 'nope.json'}"):
        models.resolve("hf:nope.json", None)
    (tmp_path / "bad.json").write_text('{"model_type": "not-a-model"}')
    with pytest.raises(ConfigError, match="transformers cannot read it as a model config"):
        models.resolve("hf:bad.json", None)


@pytest.mark.parametrize(("name", "params"), [
    ("llama3-8b", 8_030_261_248), ("llama3.1-8b", 8_030_261_248), ("llama3-70b", 70_553_706_496),
    ("llama3.1-70b", 70_553_706_496), ("llama3.1-405b", 405_853_388_800),
])
def test_llama3_presets_have_the_published_parameter_counts(name, params):
    assert models.from_preset(name).params == params


def test_a_preset_and_its_config_size_the_same_run_alike():
    """The preset (formula) and the config (exact shapes on the meta device) of Llama 3.1 8B give the same state
    per rank under fsdp×8 and the same activations at one sequence length."""
    plan = memory.Plan(ranks=8, micro_batch=1, seq_len=8192, precision="bf16-mixed", checkpointing=True)
    fsdp = methods.get("fsdp").sharding
    spec = models.resolve(f"hf:{CONFIGS / 'llama-3.1-8b'}", None)
    preset = memory.rank_memory(models.from_preset("llama3.1-8b"), fsdp, plan)
    config = memory.rank_memory(spec, fsdp, plan)
    assert preset.activations == config.activations
    assert preset.params == config.params and preset.grads == config.grads  # 8 divides every first dimension
    # only the config knows its tensors, and so Adam's step counter per tensor
    assert config.optimizer - preset.optimizer == memory.ADAM_STEP_BYTES * len(spec.shapes)


def test_advise_takes_an_hf_config_from_another_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path))
    monkeypatch.chdir(CONFIGS.parent)
    assert main(["advise", "--model", "hf:hf_configs/llama-3.1-8b", "--gpus", "8", "--gpu-mem", "80",
                 "--seq-len", "8192", "--precision", "bf16-mixed", "--checkpointing", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["model"]["params"] == 8_030_261_248
    assert str(CONFIGS / "llama-3.1-8b" / "config.json") in result["model"]["name"]
    fits = {m["method"]: m["fits"] for m in result["methods"]}
    assert fits["fsdp"] is True and fits["ddp"] is False  # 16 bytes a parameter is 120 GiB unsharded
    assert os.getcwd() == str(CONFIGS.parent)


def test_advise_with_a_hub_name_exits_2_in_one_line(capsys):
    assert main(["advise", "--model", "hf:meta-llama/Llama-3.1-8B", "--gpus", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not download models" in err[0]


def test_the_header_names_the_configs_context_only_when_no_seq_len_was_given(capsys, tmp_path, monkeypatch):
    """The note about the config's longest context (131,072 tokens for Llama 3.1) describes the default; beside
    --seq-len 1024 it said the opposite of what was sized."""
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path))
    config = f"hf:{CONFIGS / 'llama-3.1-8b'}"
    hardware = ["--gpus", "8", "--gpu-mem", "80", "--precision", "bf16-mixed"]
    assert main(["advise", "--model", config, *hardware, "--seq-len", "1024"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "sequence 1024" in header and "--seq-len defaults" not in header, header
    assert main(["advise", "--model", config, *hardware]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "(--seq-len defaults to the config's longest context, 131072)" in header, header
    assert "sequence 131072" in header, header


def test_a_config_path_without_its_prefix_is_told_the_prefix():
    """`--model path/config.json` was "unknown model preset" with the preset list: it names the hf: spelling now."""
    with pytest.raises(ConfigError, match=r"given as hf:PATH") as refused:
        models.from_preset("llama/config.json")
    assert "use --model hf:llama/config.json" in refused.value.one_line()
