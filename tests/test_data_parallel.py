"""The data-parallel rank and size, apart from the global rank: the ranks that read different batches are the
model's replicas. Under every method paratrain has they are every rank; under a method that splits one model over
several ranks (tensor, pipeline parallel) the ranks of one replica read the same batch, and what the Session reduces,
gathers or splits for evaluation goes over the replicas alone. ``replica`` (tests/helpers/replica_method.py) is such
a method at its simplest: every rank is a whole replica of its own."""

from __future__ import annotations

import json

import pytest

import paratrain as pt
from paratrain.bench.collect import summarize
from paratrain.distenv import METRICS_VAR
from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import ROOT, check, paratrain, worker_env

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "data_parallel_view.py")
REPLICA = worker_env(PARATRAIN_PLUGINS="tests.helpers.replica_method", PYTHONPATH=str(ROOT))


def test_one_process_is_one_replica():
    session = pt.Session()
    assert (session.data_parallel_rank, session.data_parallel_size) == (0, 1)
    session.close()


def _views(tmp_path, strategy: str, env=None) -> list[dict]:
    tmp_path.mkdir()
    check(paratrain("run", "--strategy", strategy, "--nproc", "2", SCRIPT, str(tmp_path), env=env, timeout=180))
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.multiprocess
def test_data_parallel_ranks_split_the_data_and_replicas_of_one_do_not(tmp_path):
    ddp = _views(tmp_path / "ddp", "ddp")
    assert [v["dp"] for v in ddp] == [[0, 2], [1, 2]]
    halves = [[i for batch in v["seen"] for i in batch] for v in ddp]
    assert sorted(halves[0] + halves[1]) == list(range(12)) and not set(halves[0]) & set(halves[1])
    assert [v["sum"] for v in ddp] == [2.0, 2.0] and [v["mean"] for v in ddp] == [0.5, 0.5]
    assert ddp[0]["gathered"] == [0, 1, 2, 0, 1, 2]
    assert sorted(i for v in ddp for batch in v["evaluated"] for i in batch) == list(range(5))

    replica = _views(tmp_path / "replica", "replica", env=REPLICA)
    for rank, view in enumerate(replica):
        assert view["world"] == 2 and view["dp"] == [0, 1], view
        assert [len(b) for b in view["seen"]] == [4, 4, 4]
        assert sorted(i for batch in view["seen"] for i in batch) == list(range(12))
        assert view["seen"] == replica[0]["seen"]  # the same shuffled order on both ranks
        assert view["evaluated"] == [[0, 1], [2, 3], [4]]  # every sample, once per replica
        assert view["gathered"] == [0, 1, 2]
        assert view["sum"] == 1.0 and view["mean"] == float(rank)  # each rank's own replica, counted once


@pytest.mark.multiprocess
def test_replicas_that_each_read_the_whole_batch_train_the_one_process_curve(tmp_path, reference):
    measured = tmp_path / "metrics"
    run = train("replica", 2, tmp_path / "run", "adamw", 60, env={**REPLICA, METRICS_VAR: str(measured)})
    assert_equivalent(reference("adamw", steps=60), run)
    # compare's throughput counts each replica's samples once, not once per rank
    batch = {json.loads(line)["samples"] for line in (measured / "rank0.jsonl").read_text().splitlines()
             if '"step"' in line}
    cell = summarize(measured, warmup=0, launch_time=0.0, tokens_per_sample=None)
    assert len(batch) == 1 and cell["samples_per_s"] * cell["step_time_median_s"] == pytest.approx(batch.pop())
