"""advise --simulate: one training step of the model under each torch method on fake tensors and a fake process group,
against the peak a real `compare` run measures on the same rank (rank 0, the rank simulated), at 2 and 4 processes;
and the time it takes to size an 8 B model at 64 ranks."""

from __future__ import annotations

import time

import pytest

from paratrain.advise import memory, simulate, simulate_models
from paratrain.bench.compare import CompareSettings, run_compare
from tests.helpers.requirements import requires

# The bundled gpt (4 heads: tp splits it over 4 ranks), trained as compare trains it: a global batch of 32 cut among
# the data-parallel replicas. 8 steps, 2 of them warm-up: the fewest after which compare profiles the tensors' peak.
WIDTH, DEPTH, GLOBAL_BATCH = 128, 2, 32
METHODS = ["ddp", "fsdp", "fsdp:shard=grad_op", "tp", "fsdp+tp"]
TOLERANCE = 0.05
# Every method to 5 %: simulated / measured at rank 0 were within 0.6 % at 2 and 4 processes, but for one run of
# fsdp+tp×2 at -4.0 % (one 1 MiB activation longer alive). Before the CPU peak ended the tensors gloo's worker
# threads free (paratrain/tensor_peak.py), the measured peaks moved 5-15 % between runs and ranks, and the suite
# held all but ddp to 20 %.


def _micro_batch(spec: str, ranks: int) -> int:
    """Samples each rank computes per forward: tp's ranks are one replica, fsdp+tp's rows of 2 are one each."""
    replicas = {"tp": 1, "fsdp+tp": ranks // 2}.get(spec, ranks)
    return GLOBAL_BATCH // replicas


@pytest.fixture(scope="module", params=[2, 4], ids=["2procs", "4procs"])
def measured(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"simulate{request.param}")
    settings = CompareSettings(workload="gpt", strategies=METHODS, nproc=[request.param], steps=8, warmup=2,
                               width=WIDTH, depth=DEPTH, timeout=400)
    cells = {c["strategy"]: c for c in run_compare(settings, out)["cells"]}
    return request.param, cells


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(1200)
def test_simulated_peak_is_the_measured_one(measured):
    ranks, cells = measured
    trainable = simulate_models.trainable("gpt", WIDTH, DEPTH)
    rows = []
    for spec in METHODS:
        cell = cells[spec]
        assert cell["status"] == "ok" and cell["peak_mem_kind"] == "cpu_tensors", (spec, cell.get("error"))
        plan = memory.Plan(ranks=ranks, micro_batch=_micro_batch(spec, ranks), seq_len=64)
        sim = simulate.simulate(trainable, spec, plan)
        real = cell["peak_mem_bytes"][0]  # rank 0's: the rank simulated
        rows.append((spec, sim.how, sim.peak, real, (sim.peak - real) / real))
    print(f"\n{ranks} processes: method, how, simulated, measured rank 0, error")
    for row in rows:
        print(f"  {row[0]:20} {row[1]:15} {row[2]:>10} {row[3]:>10} {row[4]:+.1%}")
    assert all(abs(err) <= TOLERANCE for spec, *_, err in rows), rows


def test_methods_torch_cannot_follow_say_so_and_keep_the_formula():
    trainable = simulate_models.trainable("gpt", 32, 1)
    plan = memory.Plan(ranks=2, micro_batch=2, seq_len=16)
    done = simulate.simulate_methods(trainable, ["deepspeed:zero3", "pp:1f1b", "horovod"], plan)
    for spec, sim in done.items():
        assert sim.how == "formula" and sim.peak is None and sim.note, spec


def test_a_step_holds_at_least_the_state_and_leaves_no_process_group():
    import torch.distributed as dist

    trainable = simulate_models.trainable("gpt", 32, 1)
    plan = memory.Plan(ranks=4, micro_batch=2, seq_len=16)
    from paratrain.advise import methods, models

    models_spec = models.from_bundled("gpt", 32, 1)
    for spec in ("ddp", "fsdp", "tp"):
        sim = simulate.simulate(trainable, spec, plan)
        state = memory.rank_memory(models_spec, methods.get(spec).sharding, plan).state
        assert sim.how in ("traced", "step + buckets") and sim.peak >= state, (spec, sim.peak, state)
    assert not dist.is_initialized()


def test_params_alone_cannot_be_simulated():
    from paratrain.errors import ConfigError

    with pytest.raises(ConfigError, match="--simulate runs the model"):
        simulate_models.trainable(None)


@requires("transformers")
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_8b_model_at_64_ranks_sizes_in_minutes():
    """Llama 3.1 8B under fsdp at 64 ranks, one sample of 8,192 tokens: the whole step on fake tensors. Held to 600 s
    (a busy shared machine); printed for the record (docs/advise.md gives the figure measured)."""
    started = time.perf_counter()
    sim = simulate.simulate(simulate_models.trainable("llama3.1-8b"), "fsdp",
                            memory.Plan(ranks=64, micro_batch=1, seq_len=8192))
    took = time.perf_counter() - started
    print(f"\nllama3.1-8b fsdp×64: {sim.peak / (1 << 30):.2f} GiB simulated in {took:.0f} s")
    assert sim.how == "traced" and sim.peak > 0
    assert took < 600


@requires("transformers")
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_bf16_true_step_is_the_recorded_peak():
    """bf16-true, the model cast to bf16 as the Session casts it, simulated against the compare cells of the bundled
    llama recorded in tests/advise/measured_llama.json (rank 0's peak) at 2 processes, with and without
    checkpointing: within 5 % (+1.4 … +4.0 % when recorded)."""
    import json
    from pathlib import Path

    from paratrain.workloads import get

    cases = [c for c in json.loads((Path(__file__).parent / "measured_llama.json").read_text())
             if c["precision"] == "bf16-true" and c["nproc"] == 2 and c["checkpointing"] in ("none", "full")
             and c["strategy"] in ("ddp", "fsdp", "fsdp:shard=grad_op")]
    assert len(cases) == 6, cases
    workload = get("llama")
    rows = []
    for case in cases:
        trainable = simulate_models.trainable("llama", case["width"], case["depth"])
        plan = memory.Plan(ranks=2, micro_batch=workload.global_batch // 2, seq_len=workload.tokens_per_sample,
                           precision="bf16-true", checkpointing=case["checkpointing"] != "none")
        sim = simulate.simulate(trainable, case["strategy"], plan)
        rows.append((case["strategy"], case["checkpointing"], sim.peak, case["peak"]))
    print("\n" + "\n".join(f"  {s:20} {c:5} {p:>10} {m:>10} {(p - m) / m:+.1%}" for s, c, p, m in rows))
    assert all(abs(p - m) / m <= TOLERANCE for *_, p, m in rows), rows
