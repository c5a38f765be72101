"""bf16-mixed under the sharded methods is the anchors' mixed precision: bf16 parameters gathered and computed with,
fp32 shards and optimizer state, gradients reduced in fp32. Measured on real 2-process compares of the bundled gpt
(LayerNorm, a learned position table, tied embeddings): the parameters FSDP all-gathers per step are half the bytes
of ``mixed=autocast`` (the fp32 shards gathered, then cast), the peak is lower, the state at rest is the same, and
every figure is what advise's model says. DeepSpeed's ZeRO-3 holds bf16 partitions (2 + 2 + 12 bytes) also when
the model is built by ``session.init_module()`` and partitioned from rank 0, tied embeddings included."""

from __future__ import annotations

import pytest

from paratrain.bench.compare import CompareSettings, run_compare
from tests.helpers.memory import NATIVE_BF16

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(900)]  # the fixture is 9 cells


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    settings = CompareSettings(workload="gpt", strategies=["single", "fsdp", "fsdp:mixed=autocast",
                                                           "deepspeed:zero3", "deepspeed:zero3,mixed=autocast"],
                               nproc=[1, 2],
                               steps=10, warmup=1, width=128, depth=3, precision="bf16-mixed", timeout=300)
    results = run_compare(settings, tmp_path_factory.mktemp("mixed"))
    return {c["key"]: c for c in results["cells"]}


def test_fsdp_gathers_bf16_parameters_half_the_bytes_of_autocast(compared):
    policy, autocast = compared["fsdp×2"], compared["fsdp:mixed=autocast×2"]
    assert policy["status"] == autocast["status"] == "ok", (policy.get("error"), autocast.get("error"))
    gathered = policy["comm_bytes_by_kind"]["all_gather"], autocast["comm_bytes_by_kind"]["all_gather"]
    assert gathered[0] * 2 == pytest.approx(gathered[1], rel=0.01), gathered
    assert policy["state_bytes"] == autocast["state_bytes"]  # fp32 shards and optimizer state either way
    assert max(policy["peak_mem_bytes"]) < max(autocast["peak_mem_bytes"])
    # both train the one-process bf16-mixed curve within compare's 16-bit tolerance
    for cell in (policy, autocast):
        assert cell["equivalence"] in ("exact", "within_noise"), cell["equivalence_reason"]


def test_zero3_gathers_bf16_parameters_and_reduces_fp32_gradients(compared):
    """DeepSpeed's bf16 mode gathers half the bytes of autocast over fp32 weights and reduces the same fp32 bytes.
    (With DeepSpeed's own torch_autocast on, ZeRO reduced the bf16 mode's gradients in bf16, half these bytes,
    whatever communication_data_type said: deepspeed_config._autocast.)"""
    bf16, autocast = compared["deepspeed:zero3×2"], compared["deepspeed:zero3,mixed=autocast×2"]
    assert bf16["status"] == autocast["status"] == "ok", (bf16.get("error"), autocast.get("error"))
    sent = [{kind: n for kind, n in cell["comm_bytes_by_kind"].items() if kind != "broadcast"}
            for cell in (bf16, autocast)]
    assert sent[0]["all_gather"] * 2 == pytest.approx(sent[1]["all_gather"], rel=0.01), sent
    reduced = [sum(n for kind, n in s.items() if kind != "all_gather") for s in sent]
    assert reduced[0] == pytest.approx(reduced[1], rel=0.01), sent


def test_advise_sizes_both_within_ten_percent(compared):
    for key in ("single×1", "fsdp×2", "fsdp:mixed=autocast×2", "deepspeed:zero3×2"):
        cell = compared[key]
        assert cell["peak_mem_kind"] in ("cpu_tensors", "cuda_max_allocated"), cell["peak_mem_kind"]
        predicted, measured = cell["predicted_mem"]["total"], cell["peak_mem_bytes"][0]
        # autocast over fp32 weights on a CPU without native bf16 keeps fp32 temporaries advise does not count
        # (tests/helpers/memory.py: single×1 and fsdp:mixed=autocast×2 measured 11 % above it here). The rest to 10 %
        # (fsdp×2 had been 14 % above advise inside a loaded make test, before the CPU peak ended the tensors gloo's
        # worker threads free: paratrain/tensor_peak.py).
        cpu_autocast = not NATIVE_BF16 and key in ("single×1", "fsdp:mixed=autocast×2")
        bound = 0.20 if cpu_autocast else 0.10
        assert abs(predicted - measured) / measured < bound, (key, predicted, measured)
        state = cell["predicted_mem"]["params"] + cell["predicted_mem"]["grads"] + cell["predicted_mem"]["optimizer"]
        # exact, but for the few bytes of scalars DeepSpeed's engine keeps beside the partitions (a gradient norm, a
        # step count: 9 B at ZeRO-3), which advise does not count
        assert 0 <= cell["state_bytes"][0] - state <= (64 if key.startswith("deepspeed") else 0), key


def test_zero3_holds_bf16_partitions_and_trains_the_curve(compared):
    cell = compared["deepspeed:zero3×2"]
    assert cell["status"] == "ok", cell.get("error")
    assert cell["equivalence"] in ("exact", "within_noise"), cell["equivalence_reason"]
    from paratrain.advise import memory, models
    from paratrain.advise.methods import get

    fp32 = memory.rank_memory(models.from_bundled("gpt", 128, 3), get("deepspeed:zero3").sharding,
                              memory.Plan(ranks=2, optimizer="adamw"))
    predicted = cell["predicted_mem"]  # bf16 partitions and gradients: half fp32's bytes, the same optimizer state
    assert (2 * predicted["params"], 2 * predicted["grads"]) == (fp32.params, fp32.grads)


def test_selective_checkpointing_runs_under_fsdps_mixed_precision(tmp_path):
    """fsdp's mixed precision hooks open profiler ranges that torch's selective checkpoint met in a block's
    recompute and not in its forward ("encountered during backward but not found in storage"): the op mode lets
    them through (blocks._pass_profiler_ranges) and trains the one-process curve."""
    settings = CompareSettings(workload="gpt", strategies=["single", "fsdp"], nproc=[1, 2], steps=6, warmup=1,
                               width=64, depth=2, precision="bf16-mixed", activation_checkpointing="op", timeout=300)
    cells = {c["key"]: c for c in run_compare(settings, tmp_path)["cells"]}
    assert cells["fsdp×2"]["status"] == "ok", cells["fsdp×2"].get("error")
    assert cells["fsdp×2"]["equivalence"] in ("exact", "within_noise"), cells["fsdp×2"]["equivalence_reason"]
