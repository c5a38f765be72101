"""Inside a SLURM allocation, nodes / node rank / master come from SLURM_* (flags and paratrain.toml still win)."""

import json

import pytest

from paratrain.errors import ConfigError
from paratrain.launcher.slurm import expand_hostlist, slurm_defaults
from tests.helpers.launch import SESSION_TRAIN, check, paratrain, worker_env

SLURM = {"SLURM_NNODES": "3", "SLURM_NODEID": "2", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08],cpu1"}


def test_hostlist_expansion_keeps_zero_padding():
    assert expand_hostlist("gpu[07-09,11],login1") == ["gpu07", "gpu08", "gpu09", "gpu11", "login1"]
    assert expand_hostlist("a1,b[1-2]-ib") == ["a1", "b1-ib", "b2-ib"]
    with pytest.raises(ConfigError):
        expand_hostlist("gpu[a-b]")


def test_defaults_from_the_allocation():
    assert slurm_defaults(SLURM) == {"nnodes": 3, "node_rank": 2, "master": "gpu07:29742"}
    assert slurm_defaults({**SLURM, "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "gpu07"}) == {}
    assert slurm_defaults({}) == {}
    with pytest.raises(ConfigError, match="names 3"):
        slurm_defaults({**SLURM, "SLURM_NNODES": "2"})


def _plan(*flags: str, cwd=None) -> dict:
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", *flags, "--dry-run", "--json", str(SESSION_TRAIN),
                           env=worker_env(**SLURM), cwd=cwd))
    return json.loads(proc.stdout)


def test_run_takes_the_allocation_and_flags_win(tmp_path):
    plan = _plan()
    assert plan["world_size"] == 6
    assert "--nnodes=3" in plan["command"] and "--node-rank=2" in plan["command"]
    assert "--master-addr=gpu07" in plan["command"] and "--master-port=29742" in plan["command"]
    plan = _plan("--master", "head:1234")
    assert "--master-addr=head" in plan["command"] and "--node-rank=2" in plan["command"]
    (tmp_path / "paratrain.toml").write_text('[run]\nmaster = "fromfile:4321"\n')
    assert "--master-addr=fromfile" in _plan(cwd=tmp_path)["command"]
