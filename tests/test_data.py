"""Global-batch planning: contiguous chunks, exact weights, padding for empty chunks."""

import pytest

from paratrain.data import plan_global_batch, split_even


def test_split_even_is_contiguous_and_near_even():
    assert split_even(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_even([1], 3) == [[1], [], []]


@pytest.mark.parametrize(("size", "world", "accum"), [(32, 2, 1), (32, 4, 2), (5, 2, 1), (2, 4, 1), (7, 2, 3)])
def test_weights_make_the_averaged_gradient_the_global_mean(size, world, accum):
    batch = list(range(100, 100 + size))
    plans = [plan_global_batch(batch, r, world, accum) for r in range(world)]
    assert all(len(p) == accum for p in plans)  # every rank takes the same number of steps: no hang
    # Gradient of rank r = sum_m weight_m * mean-grad_m; the launcher averages over ranks. Each real sample must
    # end up with coefficient 1/size, exactly as in the one-process mean.
    coeff: dict[int, float] = {}
    for plan in plans:
        for micro in plan:
            for i in micro.indices:
                coeff[i] = coeff.get(i, 0.0) + micro.weight / len(micro.indices) / world
    assert sorted(coeff) == batch
    assert all(abs(c - 1 / size) < 1e-12 for c in coeff.values())
    assert [m.last for m in plans[0]] == [False] * (accum - 1) + [True]


def test_chunks_concatenate_back_to_the_global_batch_in_order():
    batch = list(range(10))
    chunks = [idx for r in range(3) for m in plan_global_batch(batch, r, 3, 1) for idx in m.indices]
    assert chunks == batch


def _loader(per_rank_batch: bool, rank: int, world: int, accum: int = 1):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from paratrain.data import ShardedLoader

    data = TensorDataset(torch.arange(20))
    return ShardedLoader(DataLoader(data, batch_size=4), rank=rank, world_size=world, grad_accum=accum,
                         per_rank_batch=per_rank_batch, device=torch.device("cpu"), seed=0,
                         on_micro_batch=lambda micro: None)


def test_per_rank_batch_reads_batch_size_per_rank():
    got = [[b.tolist() for (b,) in _loader(True, rank, 2)] for rank in (0, 1)]
    assert got[0] == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17]]
    assert got[1] == [[4, 5, 6, 7], [12, 13, 14, 15], [18, 19]]


def test_global_batch_is_split_and_resume_position_is_kept():
    loader = _loader(False, 1, 2)
    it = iter(loader)
    assert next(it)[0].tolist() == [2, 3]
    assert loader.state_dict() == {"epoch": 0, "batch": 1}
    resumed = _loader(False, 1, 2)
    resumed.load_state_dict(loader.state_dict())
    assert [b.tolist() for (b,) in resumed] == [[6, 7], [10, 11], [14, 15], [18, 19]]
    assert resumed.state_dict() == {"epoch": 1, "batch": 0}
