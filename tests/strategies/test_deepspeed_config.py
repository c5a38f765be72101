"""The precision part of the DeepSpeed config paratrain writes: bf16-mixed under ZeRO 1-3 is DeepSpeed's bf16 mode
(bf16 weights, fp32 master weights, gradients reduced in fp32) with DeepSpeed's torch_autocast off (on, it reduces
in the parameters' bf16 whatever communication_data_type says; paratrain autocasts inside the engine); ZeRO-0,
fp16-mixed and ``mixed=autocast`` are torch_autocast over fp32 weights; a user's JSON that says the same is accepted.
In-process: the config is built and checked by DeepSpeed's own parser, nothing is started."""

from __future__ import annotations

import os

import pytest

from paratrain.errors import ConfigError
from paratrain.options import TrainOptions
from paratrain.strategies import deepspeed_config as ds_config

if os.environ.get("CI") != "true":  # in CI it must be there (make test installs it): a missing one fails
    pytest.importorskip("deepspeed")


def _build(precision: str, user: dict | None = None, stage: int = 3, mixed: str = "params") -> dict:
    config = ds_config.build(stage, "none", user or {}, TrainOptions(precision=precision), mixed)
    ds_config.validate(config)
    return config


@pytest.mark.parametrize(("precision", "dtype", "stage", "mixed", "weights"), [
    ("bf16-mixed", "bfloat16", 3, "params", True), ("bf16-mixed", "bfloat16", 1, "params", True),
    ("bf16-mixed", "bfloat16", 0, "params", False), ("bf16-mixed", "bfloat16", 2, "autocast", False),
    ("fp16-mixed", "float16", 3, "params", False)])
def test_bf16_mixed_under_zero_holds_bf16_weights_and_reduces_in_fp32(precision, dtype, stage, mixed, weights):
    config = _build(precision, stage=stage, mixed=mixed)
    autocast = {"enabled": False} if weights else {"enabled": True, "dtype": dtype, "lower_precision_safe_modules": []}
    assert config["torch_autocast"] == autocast
    assert config["bf16"]["enabled"] is weights and not config["fp16"]["enabled"]
    assert config.get("communication_data_type") == ("fp32" if weights else None)  # gradients reduced in fp32
    assert _build("fp32")["torch_autocast"] == {"enabled": False}
    assert not _build("fp32")["bf16"]["enabled"]


def test_a_json_saying_the_same_precision_is_accepted_and_its_tuning_kept():
    assert _build("bf16-mixed", {"bf16": {"enabled": True}})["bf16"]["enabled"]
    modules = ["torch.nn.Linear"]
    config = _build("bf16-mixed", {"torch_autocast": {"enabled": True, "dtype": "bf16",
                                                      "lower_precision_safe_modules": modules}})
    # 16-bit reduction of those modules: theirs to ask, so DeepSpeed's torch_autocast stays on for it
    assert config["torch_autocast"] == {"enabled": True, "dtype": "bfloat16", "lower_precision_safe_modules": modules}


@pytest.mark.parametrize(("precision", "user"), [
    ("fp32", {"bf16": {"enabled": True}}),
    ("bf16-mixed", {"fp16": {"enabled": True}}),
    ("bf16-mixed", {"torch_autocast": {"enabled": True, "dtype": "float16"}}),
    ("fp16-mixed", {"torch_autocast": {"enabled": False}}),
])
def test_a_json_disagreeing_with_the_precision_is_an_error_naming_both(precision, user):
    key = next(iter(user))
    with pytest.raises(ConfigError, match=f'sets "{key}".*disagrees with --precision {precision}'):
        _build(precision, user)


def test_fp16_with_clipping_under_zero_is_refused_as_deepspeed_would_clip_the_scaled_gradients():
    from paratrain.strategies.deepspeed import DeepSpeedOptions, DeepSpeedStrategy

    clipped = TrainOptions(precision="fp16-mixed", grad_clip=1.0)
    with pytest.raises(ConfigError, match="ZeRO-2 with fp16-mixed would clip the loss-scaled gradients"):
        DeepSpeedStrategy.final_config(DeepSpeedOptions(zero_stage=2), clipped)
    assert DeepSpeedStrategy.final_config(DeepSpeedOptions(zero_stage=0), clipped)["gradient_clipping"] == 1.0
    assert DeepSpeedStrategy.final_config(DeepSpeedOptions(zero_stage=3), TrainOptions(precision="fp16-mixed"))


def test_the_reduce_bucket_is_no_larger_than_the_model_unless_the_json_sizes_it():
    """ZeRO allocates its bucket whole on every backward: DeepSpeed's 5e8 elements are 1.9 GiB for any model."""
    config = {"zero_optimization": {"stage": 3}}
    assert ds_config.size_buckets(config, 3_000_000)["zero_optimization"] == {"stage": 3,
                                                                             "reduce_bucket_size": 3_000_000}
    assert ds_config.size_buckets(config, 8 * 10**9)["zero_optimization"]["reduce_bucket_size"] == 500_000_000
    theirs = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 1234}}
    assert ds_config.size_buckets(theirs, 3_000_000) == theirs
    assert config == {"zero_optimization": {"stage": 3}}  # the config given is not changed
