import pytest

from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import SESSION_TRAIN, paratrain

pytestmark = pytest.mark.multiprocess


# ×2 with AdamW, accumulation, an uneven last batch and a resumed checkpoint: tests/strategies/test_conformance.py
@pytest.mark.parametrize("nproc", [1, 4])
def test_fsdp_matches_handwritten_at_other_world_sizes(tmp_path, reference, nproc):
    run = train("fsdp", nproc, tmp_path, "sgd")
    assert_equivalent(reference("sgd"), run)


@pytest.mark.parametrize("shard", ["grad_op", "none"])
def test_fsdp_shard_modes_match(tmp_path, reference, shard):
    run = train(f"fsdp:shard={shard}", 2, tmp_path, "adamw")
    assert_equivalent(reference("adamw"), run)


def test_offload_on_cpu_machine_is_a_clear_error():
    proc = paratrain("run", "-s", "fsdp:offload=cpu", "-n", "2", str(SESSION_TRAIN), "--steps", "2")
    assert proc.returncode != 0
    assert "offload=cpu needs a GPU" in proc.stderr


@pytest.mark.parametrize("strategy", ["fsdp", "ddp"])
def test_every_rank_starts_from_rank0_weights(tmp_path, strategy):
    from tests.helpers.launch import ROOT, check

    check(paratrain("run", "-s", strategy, "-n", "2", str(ROOT / "tests" / "helpers" / "scripts" / "rank_init.py"),
                    str(tmp_path)))
    import json

    assert [json.loads((tmp_path / f"rank{r}.json").read_text())["same_as_rank0"] for r in (0, 1)] == [True, True]
