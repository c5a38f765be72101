"""Evaluation across ranks: every sample exactly once, the same number of batches on every rank, gather in dataset
order. The planning and batch-building are checked in-process; sharding, gather and metrics with real processes
(one process, ddp x 3 and fsdp x 2 — fsdp's every forward is a collective, so a rank short of a batch would hang)."""

from __future__ import annotations

import json
import math
from collections import namedtuple

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import paratrain as pt
from paratrain.errors import ConfigError
from paratrain.evaluation import EvalLoader, empty_like_batch, plan_eval
from tests.helpers.launch import ROOT, check, paratrain, python

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "eval_cases.py")
LAUNCHES = {"single": (), "ddp3": ("ddp", "3"), "fsdp2": ("fsdp", "2")}


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``launched(name)`` -> what eval_cases.py wrote under that launch (each launch runs once per module)."""
    cache: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in cache:
            out = tmp_path_factory.mktemp(f"eval-{name}") / "out.json"
            if LAUNCHES[name]:
                strategy, nproc = LAUNCHES[name]
                # 120 s: a rank left without a batch would hang the others, which must fail, not stall the suite
                check(paratrain("run", "--strategy", strategy, "--nproc", nproc, SCRIPT, str(out), timeout=120))
            else:
                check(python(SCRIPT, str(out), timeout=120))
            cache[name] = json.loads(out.read_text())
        return cache[name]

    return get


# -- in-process: planning and batch building ------------------------------------------------------------------
def test_plan_covers_every_index_once_with_equal_batch_counts():
    for world in (1, 2, 3, 4):
        for n in range(1, 14):
            for bs in (1, 2, 3, 5):
                plans = [plan_eval(n, bs, r, world) for r in range(world)]
                counts = {len(p) for p in plans}
                assert counts == {max(1, math.ceil(math.ceil(n / world) / bs))}, (world, n, bs)
                assert [i for p in plans for b in p for i in b] == list(range(n)), (world, n, bs)
                assert all(len(b) <= bs for p in plans for b in p)


def test_plan_gives_a_short_rank_empty_batches_not_fewer():
    assert plan_eval(7, 1, 0, 2) == [[0], [1], [2], [3]]
    assert plan_eval(7, 1, 1, 2) == [[4], [5], [6], []]
    assert plan_eval(2, 3, 2, 3) == [[]]
    assert plan_eval(10, 3, 0, 2) == [[0, 1, 2], [3, 4]]  # near-even, not 3 then 2 by luck of the batch size


class Records(Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return {"x": torch.full((2,), float(i)), "y": i, "name": f"s{i}"}


def test_empty_batch_keeps_structure_dtypes_and_trailing_shape():
    loader = EvalLoader(DataLoader(Records(), batch_size=4), rank=2, world_size=3, device=torch.device("cpu"))
    assert len(loader) == 1 and loader.indices == []
    (batch,) = list(loader)
    assert batch["x"].shape == (0, 2) and batch["x"].dtype == torch.float32
    assert batch["y"].shape == (0,) and batch["y"].dtype == torch.int64
    assert batch["name"] == []
    Pair = namedtuple("Pair", "a b")
    empty = empty_like_batch([Pair(torch.ones(3, 4), (torch.ones(3, dtype=torch.bool),))])
    assert isinstance(empty[0], Pair) and empty[0].a.shape == (0, 4) and empty[0].b[0].dtype == torch.bool


def test_shuffle_is_ignored_and_a_rank_gets_its_contiguous_share():
    data = TensorDataset(torch.arange(10))
    loader = EvalLoader(DataLoader(data, batch_size=2, shuffle=True), rank=1, world_size=3,
                        device=torch.device("cpu"))
    assert [x.tolist() for (x,) in loader] == [[4, 5], [6]]
    assert [x.tolist() for (x,) in loader] == [[4, 5], [6]]  # a second pass is the full share again


def test_iterable_dataset_is_refused_with_a_hint():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ConfigError) as info:
        EvalLoader(DataLoader(Stream(), batch_size=2), rank=0, world_size=2, device=torch.device("cpu"))
    assert "IterableDataset" in info.value.message and info.value.hint


def test_session_gather_in_one_process_is_the_tensor_detached():
    session = pt.Session()
    t = torch.arange(3.0, requires_grad=True) * 2
    out = session.gather(t)
    assert not out.requires_grad and out.tolist() == [0.0, 2.0, 4.0]
    assert session.gather(torch.tensor(5)).tolist() == [5]  # 0-dim counts as one element
    loader = session.prepare_eval(DataLoader(TensorDataset(torch.arange(5)), batch_size=2))
    assert len(loader) == 3 and [x.tolist() for (x,) in loader] == [[0, 1], [2, 3], [4]]
    session.close()


# -- real processes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(LAUNCHES))
def test_every_sample_evaluated_exactly_once_in_dataset_order(launched, name):
    result = launched(name)
    world = result["world"]
    assert world == {"single": 1, "ddp3": 3, "fsdp2": 2}[name]
    for case in result["sharding"]:
        n, bs = case["n"], case["batch_size"]
        where = f"n={n} batch_size={bs} world={world}"
        assert case["gathered"] == list(range(n)), where
        assert case["every_rank_range"] == [True] * world, where  # gather returns the same on every rank
        expected = [plan_eval(n, bs, r, world) for r in range(world)]
        assert case["len"] == case["yielded"] == [len(p) for p in expected], where  # lock-step
        assert case["sizes"] == [[len(b) for b in p] for p in expected], where
        assert case["dtypes_ok"] == case["second_pass_same"] == case["indices_ok"] == [True] * world, where
    if world == 3:  # shares 4, 3, 3 and 1, 1, 0: the short ranks get 0-sample batches, never fewer batches
        by_case = {(c["n"], c["batch_size"]): c["sizes"] for c in result["sharding"]}
        assert by_case[(10, 1)] == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]]
        assert by_case[(2, 1)] == [[1], [1], [0]]


@pytest.mark.parametrize("name", ["ddp3", "fsdp2"])
def test_outputs_loss_and_accuracy_match_one_process(launched, name):
    single, multi = launched("single"), launched(name)
    for one, many in zip(single["model"], multi["model"], strict=True):
        if many["batch_size"] == 1:  # 11 samples: some rank evaluated a 0-sample batch
            assert any(0 in sizes for sizes in many["sizes"])
        assert many["samples"] == one["samples"] == 11
        assert torch.allclose(torch.tensor(many["logits"]), torch.tensor(one["logits"]), atol=1e-6)
        assert many["loss_sum"] == pytest.approx(one["loss_sum"], rel=1e-6)
        assert many["accuracy"] == one["accuracy"]


def test_gather_edge_cases_over_processes(launched):
    g = launched("ddp3")["gather"]
    assert g["scalar"] == [0.0, 1.0, 2.0]
    assert g["rows"] == [[1, 1], [2, 2], [2, 2]] and g["rows_shape"] == [3, 2]  # rank 0 gave 0 rows
    assert g["all_empty_shape"] == [0, 3]
    assert g["bool"] == [True, False, True]
    assert g["detached"] is True
    assert g["mismatch_raised"] == [True, True, True]  # every rank raises alike: nobody is left waiting
