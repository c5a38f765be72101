"""The model against real runs: the state each rank holds in a real 2-process `compare` of the bundled gpt, the
bytes its forward pass saves for backward, and the history lookup that puts those measurements beside estimates."""

from __future__ import annotations

import pytest
import torch

from paratrain.advise import activations, measured, models
from paratrain.bench import store
from paratrain.bench.compare import CompareSettings, run_compare
from tests.helpers.memory import NATIVE_BF16, assert_state_is_advises
from tests.helpers.requirements import requires

WIDTH, DEPTH = 32, 1
# The methods whose state the advise model reproduces byte for byte on a transformer, beyond those `make demo`'s
# compare already runs (every default method, DeepSpeed's stages included, checked on the mlp in
# tests/cli/test_demo.py): FSDP's other sharding modes, and single and ddp for the history lookup below.
METHODS = ["single", "ddp", "fsdp:shard=grad_op", "fsdp:shard=none"]


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibration")
    settings = CompareSettings(workload="gpt", strategies=METHODS, nproc=[2], steps=3, warmup=1, width=WIDTH,
                               depth=DEPTH, timeout=240)
    results = run_compare(settings, out)
    store.save_run(results, out, db=out / "history.db")
    return results, out / "history.db"


def test_state_bytes_equal_the_model_exactly(compared):
    results, _ = compared
    spec = models.from_bundled("gpt", WIDTH, DEPTH)
    ok = [c for c in results["cells"] if c["status"] == "ok"]
    assert {c["strategy"] for c in ok} >= set(METHODS), \
        [(c["key"], c["status"], c.get("error")) for c in results["cells"]]
    assert_state_is_advises(ok, spec, "adamw")  # the gpt workload trains with AdamW in fp32


@pytest.mark.parametrize(("width", "depth", "batch"), [(64, 2, 32), (128, 3, 8)])
def test_activation_formula_matches_what_autograd_saves(width, depth, batch):
    from paratrain.workloads.gpt import build

    built = build(width, depth)
    x = torch.stack([built.train[i][0] for i in range(batch)])
    y = torch.stack([built.train[i][1] for i in range(batch)])
    saved = models.saved_activation_bytes(built.model, lambda: built.loss_fn(built.model(x), y))
    predicted = activations.activation_bytes(models.from_bundled("gpt", width, depth).transformer, batch, 4)
    assert abs(predicted - saved) / saved < 0.10, (predicted, saved)




@pytest.mark.parametrize("checkpointing", [False, "full", "op", "every:2"], ids=["none", "full", "op", "every2"])
@pytest.mark.parametrize(("workload", "width", "depth", "batch", "mixed"),
                         [("gpt", 128, 4, 16, False), ("gpt", 256, 6, 8, False),
                          pytest.param("gpt", 128, 4, 16, True, marks=pytest.mark.xfail(
                              not NATIVE_BF16, reason="open, issue 42's note: on a CPU without native bf16 (no "
                              "avx512_bf16/amx) the gpt's bf16 step peaked 13-21 % above advise, on old main too")),
                          pytest.param("llama", 256, 4, 16, False, marks=requires("transformers")),
                          pytest.param("llama", 256, 4, 16, True, marks=requires("transformers"))],
                         ids=["gpt128", "gpt256", "gpt128-bf16-mixed", "llama256", "llama256-bf16-mixed"])
def test_peak_activation_memory_is_what_advise_predicts(workload, width, depth, batch, mixed, checkpointing):
    """The peak a real step allocates (torch's allocator, through its profiler), in each of the Session's activation
    checkpointing modes (none, full, op's selective per-op policy, every:2's every other block), against advise's
    activation model: within 10 %. The llama is transformers' own, whose RMSNorm keeps more than a LayerNorm and
    whose key/value cache the checkpointing must turn off. Under bf16-mixed the model runs as the Session runs it
    (autocast over fp32 weights, its weight cache off when checkpointing): counting every tensor at 2 bytes was
    20-37 % low there. Measured here (CPU, torch 2.13), advise's error per mode — gpt128: none -2.2 %, full +1.9 %,
    op +0.9 %, every:2 +0.9 %; gpt256: -2.9, -3.8, -1.6, -1.4 %; llama256: -1.2, +3.2, +2.0, +1.4 %;
    llama256 bf16-mixed: -4.9, -5.3, -3.8, -2.4 %."""
    import importlib

    from paratrain import precision
    from paratrain.blocks import checkpoint_activations
    from tests.helpers.memory import step_peak_bytes

    built = importlib.import_module(f"paratrain.workloads.{workload}").build(width, depth)
    if checkpointing:
        checkpoint_activations(built.model, checkpointing)
    if mixed:
        precision.apply(built.model, "bf16-mixed", torch.device("cpu"), cache=not checkpointing)
    x = torch.stack([built.train[i][0] for i in range(batch)])
    y = torch.stack([built.train[i][1] for i in range(batch)])

    def step() -> None:
        built.loss_fn(built.model(x), y).backward()

    step()  # the gradients exist from here on: the measured peak is the activations'
    measured = step_peak_bytes(step)
    arch = models.from_bundled(workload, width, depth).transformer
    predicted = activations.activation_bytes(arch, batch, 2 if mixed else 4, checkpointing=checkpointing,
                                             autocast=mixed)
    assert abs(predicted - measured) / measured < 0.10, (predicted, measured)


def test_history_measurements_are_found_for_the_same_model(compared):
    results, db = compared
    spec = models.from_bundled("gpt", WIDTH, DEPTH)
    found = measured.measurements(spec.params, world=2, db=db)
    assert found["single"]["speedup"] == 1.0 and found["ddp"]["nproc"] == 2
    assert found["ddp"]["run"] == results["id"]
    assert found["ddp"]["device"] == ("gpu" if torch.cuda.is_available() else "cpu")  # where compare really ran
    assert measured.measurements(spec.params + 1, world=2, db=db) == {}  # another model: nothing
    at_one = measured.measurements(spec.params, world=1, db=db)
    assert "ddp" not in at_one and at_one["single"]["speedup"] == 1.0  # ddp×2 says nothing about one GPU


@requires("transformers")
@pytest.mark.parametrize("checkpointing", [False, "full"], ids=["none", "full"])
def test_a_large_vocabulary_peaks_in_the_loss_backward(checkpointing):
    """With a vocabulary much wider than the model (Llama 3's 128k tokens) the step's peak is the loss's backward:
    the log-softmax output it kept, the gradient arriving at it and the one it makes, three fp32 copies of the
    logits (activations.loss_backward_bytes). Computed in bf16 parameters under autocast, as fsdp's mixed precision
    runs: a 32k-vocabulary llama of width 128, where the logits are 90 % of the peak, within 10 %."""
    from paratrain.blocks import checkpoint_activations
    from paratrain.workloads import llama
    from tests.helpers.memory import step_peak_bytes

    built = llama.build_from(lambda _vocab: llama.tiny_config(32_000, 128, 2))
    if checkpointing:
        checkpoint_activations(built.model, checkpointing)
    built.model.to(torch.bfloat16)
    x = torch.stack([built.train[i][0] for i in range(8)])
    y = torch.stack([built.train[i][1] for i in range(8)])

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = built.loss_fn(built.model(x), y)
        loss.backward()

    step()
    measured = step_peak_bytes(step)
    arch = models.transformer_of(built.model.config, x.shape[1])
    predicted = activations.activation_bytes(arch, 8, 2, checkpointing=checkpointing)
    logits = 8 * x.shape[1] * 32_000 * 4
    assert measured > 2.5 * logits  # the loss's backward is the peak: more than two copies of the logits
    assert abs(predicted - measured) / measured < 0.10, (predicted, measured)
