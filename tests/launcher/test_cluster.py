"""Cluster environments (launcher/cluster.py): the scheduler that started paratrain run gives the node count, node
rank and master; flags and paratrain.toml still win. SLURM is tested in test_slurm.py; here the interface and
Kubeflow's PyTorch runtime (PET_* variables, as its pods get them)."""

from __future__ import annotations

import json

import pytest

from paratrain.errors import ConfigError
from paratrain.launcher import cluster
from tests.helpers.launch import SESSION_TRAIN, check, paratrain, worker_env

KUBEFLOW = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "trainjob-node-0-0.trainjob",
            "PET_MASTER_PORT": "29400", "PET_NPROC_PER_NODE": "4"}


def test_every_environment_implements_the_interface():
    for name, target in cluster.ENVIRONMENTS.items():
        env = cluster._load(target)
        assert env.name == name and env.detect({}) is False and callable(env.defaults)
    assert cluster.defaults({}) == {}


def test_kubeflow_defaults_from_its_pet_variables():
    assert cluster.detect(KUBEFLOW).name == "kubeflow"
    assert cluster.defaults(KUBEFLOW) == {"nnodes": 2, "node_rank": 1, "nproc": 4,
                                          "master": "trainjob-node-0-0.trainjob:29400"}
    one_node = {**KUBEFLOW, "PET_NNODES": "1", "PET_NPROC_PER_NODE": "auto"}
    assert cluster.defaults(one_node) == {}  # nothing decided: one node, and "auto" is torchrun's, not a count
    with pytest.raises(ConfigError, match='PET_NODE_RANK="x" is not a number'):
        cluster.defaults({**KUBEFLOW, "PET_NODE_RANK": "x"})


def test_a_kubeflow_pod_needs_no_flags_and_flags_still_win():
    def plan(*flags: str) -> dict:
        return json.loads(check(paratrain("run", "-s", "ddp", *flags, "--dry-run", "--json", str(SESSION_TRAIN),
                                          env=worker_env(**KUBEFLOW))).stdout)

    got = plan()
    assert got["world_size"] == 8 and got["nproc_per_node"] == 4
    assert "--nnodes=2" in got["command"] and "--node-rank=1" in got["command"]
    assert "--master-addr=trainjob-node-0-0.trainjob" in got["command"] and "--master-port=29400" in got["command"]
    assert plan("-n", "2", "--master", "head:1234")["world_size"] == 4
