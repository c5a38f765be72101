"""Bytes per step per method, link parsing, and the real all-reduce probe."""

from __future__ import annotations

import pytest

from paratrain.advise import comm
from paratrain.errors import ConfigError

PSI = 1_000_000


@pytest.mark.parametrize("n", [2, 4, 64])
def test_ring_volumes(n):
    ring = (n - 1) / n
    assert comm.step_bytes("allreduce", PSI, n, 2, 2) == round(2 * PSI * 2 * ring)  # 2Ψ(N−1)/N
    assert comm.step_bytes("shard_grads", PSI, n, 2, 2) == comm.step_bytes("allreduce", PSI, n, 2, 2)
    assert comm.step_bytes("shard_all", PSI, n, 2, 2) == round(3 * PSI * 2 * ring)  # ≈3Ψ
    assert comm.step_bytes("dp", PSI, n, 4, 4) == 8 * PSI * (n - 1)  # grows with N: not a ring


def test_one_rank_sends_nothing():
    assert all(comm.step_bytes(p, PSI, 1, 4, 4) == 0 for p in ("allreduce", "shard_all", "dp", "none"))


def test_links():
    assert comm.parse_link("NVLink").gbps == comm.LINKS["nvlink"]
    assert comm.parse_link("25").gbps == 25
    for bad, needle in (("warp", "not a link name"), ("0", "plausible"), ("-3", "plausible")):
        with pytest.raises(ConfigError, match=needle):
            comm.parse_link(bad)


def test_probe_measures_a_real_all_reduce():
    link = comm.probe(nproc=2, megabytes=8)
    assert link.name.startswith("measured (gloo, 2 processes)")
    assert 0.001 < link.gbps < 1000
