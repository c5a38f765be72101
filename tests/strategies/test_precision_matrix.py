"""Precision and evaluation on an ordinary Transformer-encoder classifier under every method that lists them.

The model (tests/helpers/scripts/transformer_cls.py) has what broke methods one by one: an fp32 position buffer
added to the embeddings (FSDP2's MixedPrecisionPolicy and DeepSpeed's bf16 mode cast parameters, not buffers, so
the next bf16 LayerNorm got fp32 on a CPU), a stock nn.TransformerEncoder evaluated with a key padding mask (its
nested-tensor fast path broke where ZeRO-3 hooks the attention, and under CPU autocast), AdamW, a
warm-up + cosine schedule, clipping and evaluation through prepare_eval after every epoch. Real 2-process runs.
"""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from tests.helpers.launch import ROOT, check, paratrain

pytestmark = pytest.mark.multiprocess

SCRIPT = ROOT / "tests" / "helpers" / "scripts" / "transformer_cls.py"
STEPS = 16  # two epochs of 8 steps: two evaluations
# bf16 keeps 8 significant bits; splitting the batch over ranks changes which partial sums are rounded (see
# tests/test_options.py): compare's 16-bit tolerance. Measured ≤ 1.0e-3 on the losses, ≤ 3.7e-4 on the evaluation
# losses; one process's bf16-mixed run differs from its fp32 run by 1.1e-3, bf16-true by 2.3e-2.
BF16_TOL = 1e-2
# compare's fp32 tolerance; measured ≤ 2.4e-7.
FP32_TOL = 1e-5
NEEDS_DEEPSPEED = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None and os.environ.get("CI") != "true",
                                     reason="missing backend: deepspeed")


def _run(folder, strategy: str, nproc: int, *flags: str) -> dict:
    out = folder / f"{strategy.replace(':', '-')}{nproc}-{'-'.join(f.strip('-') for f in flags) or 'fp32'}"
    proc = check(paratrain("run", "-s", strategy, "-n", str(nproc), *flags, str(SCRIPT), str(out),
                           "--steps", str(STEPS)))
    data = json.loads((out / "losses.json").read_text())
    data["stderr"] = proc.stderr
    return data


def _max_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), f"curves differ in length: {len(a)} vs {len(b)}"
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One process's run per precision, made once for the module."""
    folder, cache = tmp_path_factory.mktemp("single"), {}

    def get(*flags: str) -> dict:
        if flags not in cache:
            cache[flags] = _run(folder, "single", 1, *flags)
        return cache[flags]

    return get


@pytest.mark.parametrize(("strategy", "precision"), [
    ("ddp", "bf16-mixed"),
    ("fsdp", "bf16-mixed"),
    pytest.param("deepspeed:zero2", "bf16-mixed", marks=NEEDS_DEEPSPEED),
    pytest.param("deepspeed:zero3", "bf16-mixed", marks=NEEDS_DEEPSPEED),
    ("fsdp", "bf16-true"),
])
def test_each_listed_precision_matches_one_process_on_a_transformer(tmp_path, single, strategy, precision):
    ref = single("--precision", precision)
    run = _run(tmp_path, strategy, 2, "--precision", precision)
    loss, evals = _max_diff(ref["losses"], run["losses"]), _max_diff(ref["eval"], run["eval"])
    assert loss <= BF16_TOL and evals <= BF16_TOL, f"{strategy}×2 {precision}: loss {loss:.3g}, eval {evals:.3g}"
    assert _max_diff(single()["losses"], run["losses"]) > FP32_TOL  # it really ran in 16 bits, not fp32


@pytest.mark.parametrize(("strategy", "notice"), [
    pytest.param("deepspeed:zero3", True, marks=NEEDS_DEEPSPEED),  # hooks the attention: nested tensors off
    ("fsdp", False),  # hooks the layers only: the attention keeps its fast path, and the nested tensor works
])
def test_a_stock_encoder_evaluates_with_a_padding_mask_under_sharding(tmp_path, single, strategy, notice):
    ref = single()
    run = _run(tmp_path, strategy, 2)
    loss, evals = _max_diff(ref["losses"], run["losses"]), _max_diff(ref["eval"], run["eval"])
    assert loss <= FP32_TOL and evals <= FP32_TOL, f"{strategy}×2: loss {loss:.3g}, eval {evals:.3g}"
    said = [line for line in run["stderr"].splitlines() if "use_nested_tensor=False" in line]
    assert len(said) == notice and all("in encoder (nn.TransformerEncoder)" in line for line in said), run["stderr"]
    assert "use_nested_tensor=False" not in ref["stderr"]  # one process keeps torch's fast path
