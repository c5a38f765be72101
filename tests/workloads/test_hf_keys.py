"""A Hugging Face config.json with a misspelt or missing key is refused in one line, where transformers filled in its
defaults and paratrain sized (advise) or trained (compare) another model; the many keys real configs carry beyond
the config class's own are still taken."""

from __future__ import annotations

import json

import pytest

from paratrain.errors import ConfigError
from paratrain.workloads import hf_config
from tests.helpers.launch import ROOT, paratrain, worker_env
from tests.helpers.requirements import requires

pytestmark = requires("transformers")
LLAMA = ROOT / "tests" / "helpers" / "hf_configs" / "llama-3.1-8b" / "config.json"


def _write(tmp_path, **changes):
    """Llama 3.1 8B's config with keys renamed ({old: new}) or dropped ({old: None})."""
    raw = json.loads(LLAMA.read_text())
    for old, new in changes.items():
        value = raw.pop(old)
        if new is not None:
            raw[new] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return path


def test_advise_names_a_misspelt_key_and_the_key_it_meant_in_one_line(tmp_path):
    path = _write(tmp_path, num_hidden_layers="num_hiden_layers")
    proc = paratrain("advise", "--model", f"hf:{path}", "--gpus", "1", "--gpu-mem", "80", cwd=tmp_path,
                     env=worker_env(PARATRAIN_HOME=str(tmp_path)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("paratrain: error: "), proc.stderr
    assert 'unknown key "num_hiden_layers" (did you mean "num_hidden_layers"?)' in lines[0]
    assert "parameters" not in proc.stdout  # nothing was sized


def test_a_missing_required_key_is_named_where_compare_and_advise_read_the_config(tmp_path):
    path = _write(tmp_path, hidden_size=None)
    with pytest.raises(ConfigError, match='no "hidden_size", a key paratrain needs') as missing:
        hf_config.load(f"hf:{path}")
    assert "unknown key" not in missing.value.one_line()


def test_the_keys_real_configs_carry_beyond_the_config_class_are_taken(tmp_path):
    """architectures, torch_dtype, rope_scaling, bos_token_id… are in the fixture already; these come from other
    published configs (a fine-tune's name, GPT-2's n_ctx, a remote-code map, a quantization)."""
    raw = json.loads(LLAMA.read_text())
    raw.update({"_name_or_path": "meta-llama/Llama-3.1-8B", "n_ctx": 2048, "transformers_version": "4.43.0",
                "auto_map": {}, "quantization_config": {"quant_method": "bitsandbytes"}, "pretraining_tp": 1,
                "use_cache": True, "initializer_range": 0.02, "head_dim": 128})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    config = hf_config.load(f"hf:{path}")
    assert (config.num_hidden_layers, config.hidden_size) == (32, 4096)
