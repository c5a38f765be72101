"""The ranking: what fits, what is cheapest on the link, what measurements say."""

from __future__ import annotations

from paratrain.advise import comm, memory, models, recommend

NVLINK = comm.Link("nvlink", comm.LINKS["nvlink"])


def _advise(params: float, gpus: int, mem: float, nodes: int = 1, measured=None, **plan):
    hw = recommend.Hardware(gpus=gpus, gpu_mem_gib=mem, link=NVLINK, nodes=nodes, host_mem_gib=512)
    return recommend.advise(models.from_params(params), hw, memory.Plan(ranks=hw.world, **plan), measured=measured)


def _row(result, spec):
    return next(r for r in result["methods"] if r["method"] == spec)


def test_fits_everywhere_gets_ddp():
    result = _advise(1e8, gpus=8, mem=80)
    assert result["recommendation"][0] == "ddp"
    assert all(r["fits"] for r in result["methods"])
    assert result["recommendation"][-1] == "single"  # it leaves seven GPUs idle


def test_one_gpu_gets_single():
    assert _advise(1e8, gpus=1, mem=80)["recommendation"][0] == "single"


def test_fits_only_sharded_gets_the_least_communication():
    result = _advise(3e9, gpus=8, mem=40)  # fp32 Adam: 48 GB replicated, 6 GB sharded
    assert not _row(result, "ddp")["fits"]
    first = result["recommendation"][0]
    fitting = [r for r in result["methods"] if r["fits"] and r["usable"]]
    assert _row(result, first)["comm_bytes_per_step"] == min(r["comm_bytes_per_step"] for r in fitting)
    assert first == "fsdp:shard=grad_op"  # equal bytes to zero1/zero2, and runnable here
    assert "fits" in result["reasons"][first] and "GB per step" in result["reasons"][first]


def test_fits_nowhere_says_what_would():
    result = _advise(2e11, gpus=8, mem=80)  # 3.2 TB of fp32 Adam state
    assert result["recommendation"] == []
    text = " ".join(result["fixes"])
    assert "64 GPUs per node" in text and "bf16-mixed" in text
    assert "host memory per node" in result["reasons"]["deepspeed:zero3,offload=all"]  # 3.2 TB > 512 GiB


def test_fits_only_offloaded():
    result = _advise(1.5e10, gpus=1, mem=80)  # 240 GB of fp32 Adam state, one GPU, 512 GiB of host memory
    assert result["recommendation"] == ["deepspeed:zero3,offload=all"]


def test_one_machine_methods_drop_out_across_nodes():
    result = _advise(1e8, gpus=8, mem=80, nodes=2)
    assert "dp" not in result["recommendation"] and "single" not in result["recommendation"]
    assert _row(result, "dp")["unusable_because"] == "one machine only"
    assert _row(result, "ddp")["devices"] == 16


def test_measurements_outrank_estimates():
    measured = {"single": {"key": "single×1", "nproc": 1, "speedup": 1.0, "run": "r"},
                "ddp": {"key": "ddp×2", "nproc": 2, "speedup": 0.5, "run": "r"}}
    result = _advise(1e6, gpus=2, mem=8, measured=measured)
    assert result["recommendation"][:2] == ["single", "ddp"]
    assert "measured: ddp×2 0.50× single" in result["reasons"]["ddp"]


def test_json_contract():
    result = _advise(1e8, gpus=4, mem=24)
    assert {"methods", "recommendation", "reasons"} <= set(result)
    row = result["methods"][0]
    assert {"method", "per_rank_bytes", "fits", "comm_bytes_per_step"} <= set(row)
    assert {"params", "grads", "optimizer", "activations", "total"} <= set(row["per_rank_bytes"])
    assert set(result["reasons"]) == {r["method"] for r in result["methods"]}


def test_a_row_short_of_host_memory_says_so():
    hw = recommend.Hardware(gpus=8, gpu_mem_gib=80, link=NVLINK, host_mem_gib=16, host_from="this machine")
    result = recommend.advise(models.from_params(1.3e9), hw, memory.Plan(ranks=8))
    row = _row(result, "deepspeed:zero3,offload=all")  # 3.03 GiB per rank × 8 ranks > 90 % of 16 GiB
    assert not row["fits"] and row["short_of"] == "host"
    why = row["does_not_fit_because"]
    assert "24.2 GiB of host memory per node (8 ranks × 3.03 GiB), 14.4 GiB usable of 16 GiB" in why
    assert "--host-mem" in why  # the host memory was this machine's, not the planned one's
    assert result["reasons"]["deepspeed:zero3,offload=all"].startswith(f"does not fit: {why}")
    assert _row(result, "ddp")["does_not_fit_because"] is None
    small = _advise(3e9, gpus=8, mem=40)
    assert _row(small, "ddp")["short_of"] == "GPU" and "per GPU" in _row(small, "ddp")["does_not_fit_because"]


def _advise_preset(name: str, gpus: int, mem: float, nodes: int = 1):
    hw = recommend.Hardware(gpus=gpus, gpu_mem_gib=mem, link=NVLINK, nodes=nodes, host_mem_gib=512)
    return recommend.advise(models.from_preset(name), hw, memory.Plan(ranks=hw.world))


def test_tensor_parallel_divides_the_blocks_matrices_and_keeps_the_rest_whole():
    spec = models.from_preset("llama3-8b")
    arch = spec.transformer
    assert spec.split_elements == arch.layers * sum(arch.block_matrices())  # no biases in Llama
    from paratrain.advise.methods import get

    mem = memory.rank_memory(spec, get("tp").sharding, memory.Plan(ranks=8, optimizer="sgd"))
    assert mem.params == round(4 * (spec.params - spec.split_elements * 7 / 8))
    whole = memory.rank_memory(spec, get("ddp").sharding, memory.Plan(ranks=8, optimizer="sgd"))
    assert mem.activations < whole.activations  # the heads and MLP units of one rank


def test_tensor_parallel_is_one_machine_and_never_cuts_a_head():
    row = _row(_advise_preset("llama3-8b", gpus=8, mem=80, nodes=2), "tp")
    assert not row["usable"] and row["unusable_because"] == "one machine only"
    row = _row(_advise_preset("gpt2-xl", gpus=8, mem=80), "tp")  # 25 heads
    assert not row["usable"] and "25 attention heads do not divide by 8" in row["unusable_because"]
    assert _row(_advise(1e8, gpus=8, mem=80), "tp")["usable"] is False  # no architecture: no plan to split by


def test_tensor_parallel_sends_four_all_reduces_of_each_blocks_output_per_micro_batch():
    row = _row(_advise_preset("llama3-8b", gpus=8, mem=80), "tp")
    arch = models.from_preset("llama3-8b").transformer
    block_io = 8 * arch.layers * arch.seq_len * arch.hidden * 4  # 8 micro-batches of 1, fp32
    assert row["comm_bytes_per_step"] == round(4 * block_io * 2 * 7 / 8)


def test_a_pipeline_stage_holds_its_blocks_and_the_bubble_ranks_it_after_methods_without_one():
    from paratrain.advise.methods import get

    spec = models.from_preset("llama-13b")
    plan = memory.Plan(ranks=8, optimizer="adamw")
    stage = memory.rank_memory(spec, get("pp:1f1b").sharding, plan)
    whole = memory.rank_memory(spec, get("ddp").sharding, plan)
    assert whole.state / 8 < stage.state < whole.state / 7  # 5 of 40 blocks, and the embeddings
    assert stage.activations < memory.rank_memory(spec, get("pp:gpipe").sharding, plan).activations
    assert memory.bubble_fraction(2, 4) == 0.2 and memory.bubble_fraction(8, 16) == 7 / 23
    result = _advise_preset("llama-13b", gpus=8, mem=80)
    pp = _row(result, "pp:1f1b")
    assert pp["fits"] and pp["usable"] and pp["bubble"] == 7 / 23
    assert pp["comm_bytes_per_step"] < _row(result, "fsdp")["comm_bytes_per_step"] / 10  # point to point only
    ranked = result["recommendation"]
    assert ranked.index("pp:1f1b") > max(ranked.index(m) for m in ("fsdp", "deepspeed:zero3"))
    assert not _row(_advise_preset("gpt2", gpus=16, mem=80), "pp:1f1b")["usable"]  # 12 blocks, 16 stages


def test_fsdp_with_tensor_parallel_shards_the_tp_slices_across_the_groups():
    from paratrain.advise.methods import get

    spec = models.from_preset("llama3-8b")
    plan = memory.Plan(ranks=8, optimizer="adamw")
    pairs = memory.rank_memory(spec, get("fsdp+tp").sharding, plan)
    tp2 = memory.rank_memory(spec, get("tp").sharding, memory.Plan(ranks=2, optimizer="adamw"))
    assert pairs.state == sum(-(-x // 4) for x in (tp2.params, tp2.grads, tp2.optimizer))  # 4 groups of 2
    assert pairs.activations == tp2.activations and pairs.buffers > 0  # tp's slices, one gathered block
    row = _row(_advise_preset("llama3-8b", gpus=4, mem=80), "fsdp+tp:tp=8")
    assert not row["usable"] and "groups of 8" in row["unusable_because"]


def test_a_method_that_refuses_the_precision_is_not_recommended():
    """paratrain refuses bf16-true under DeepSpeed, tp and Horovod, and fp16-mixed under fsdp: advise says so instead
    of recommending a run that cannot be started."""
    true16 = _advise(1e9, gpus=8, mem=80, precision="bf16-true")
    for spec in ("deepspeed:zero3", "tp", "horovod"):
        row = _row(true16, spec)
        assert not row["usable"] and spec not in true16["recommendation"]
        assert row["unusable_because"].startswith("does not run bf16-true"), row
    assert _row(true16, "fsdp")["usable"] and "fsdp" in true16["recommendation"]
    fp16 = _advise(1e9, gpus=8, mem=80, precision="fp16-mixed")
    assert "fsdp" not in fp16["recommendation"] and "ddp" in fp16["recommendation"]
    assert "fp16-mixed" in _row(fp16, "fsdp")["unusable_because"]


def test_bf16_true_holds_two_bytes_of_everything_and_no_master_copy():
    """The model cast to bf16: parameters, gradients and each of Adam's two moments in bf16 (8 bytes a parameter,
    half of fp32's 16), gathered and reduced in bf16 too."""
    model = models.from_params(1e9)
    plan = memory.Plan(ranks=1, precision="bf16-true", optimizer="adamw")
    single = memory.rank_memory(model, memory.Sharding(), plan)
    assert (single.params, single.grads) == (2 * model.params, 2 * model.params)
    assert single.optimizer - 4 * len(model.shapes or ()) == 4 * model.params
    fsdp = next(m for m in recommend.all_methods() if m.spec == "fsdp").sharding
    assert memory.wire_bytes(fsdp, "bf16-true") == (2, 2)
    assert memory.wire_bytes(fsdp, "bf16-mixed") == (2, 4)
