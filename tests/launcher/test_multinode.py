"""Multi-node for real on one machine: two launchers on two network "hosts" form one job (tests/helpers/netns.py)."""

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers.equivalence import assert_equivalent
from tests.helpers.keras import KERAS_EQUIV, TOL, diffs, plain, tf_env
from tests.helpers.launch import ROOT, SESSION_TRAIN, worker_env
from tests.helpers.netns import two_hosts
from tests.helpers.requirements import requires

pytestmark = pytest.mark.multiprocess
STEPS = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _node(prefix: list[str], rank: int, master: str, *args: str, method: str = "ddp") -> subprocess.Popen:
    return subprocess.Popen([*prefix, sys.executable, "-m", "paratrain.cli.main", "run", "-s", method, "-n", "1",
                             "--nnodes", "2", "--node-rank", str(rank), "--master", master, *args],
                            cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(("method", "shown"), [("ddp", "ddp"), ("deepspeed:zero3", "deepspeed:zero3")])
def test_two_hosts_train_the_single_process_curve(tmp_path, reference, method, shown):
    if method.startswith("deepspeed") and os.environ.get("CI") != "true":
        pytest.importorskip("deepspeed")
    with two_hosts() as hosts:
        if not hosts.isolated:
            print("network namespaces not available here: both nodes run over 127.0.0.1")
        master = f"{hosts.addresses[0]}:{_free_port()}"
        args = [str(SESSION_TRAIN), "--steps", str(STEPS), "--out", str(tmp_path)]
        nodes = [_node(hosts.prefixes[r], r, master, *args, method=method) for r in (0, 1)]
        outputs = [n.communicate(timeout=240) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outputs
    assert f"{shown} × 2 processes" in outputs[0][1]
    assert_equivalent(reference("sgd", steps=STEPS), tmp_path)


def test_node_0_alone_fails_within_the_rendezvous_timeout_naming_what_it_waited_for(tmp_path):
    with two_hosts() as hosts:
        master = f"{hosts.addresses[0]}:{_free_port()}"
        start = time.monotonic()
        node = _node(hosts.prefixes[0], 0, master, "--rendezvous-timeout", "5", str(SESSION_TRAIN))
        _out, err = node.communicate(timeout=120)
    assert node.returncode == 1, err
    assert "node 0 gave up waiting for the other 1 node(s) to join" in err.strip().splitlines()[-1]
    assert time.monotonic() - start < 60


def test_node_1_with_a_wrong_master_fails_naming_it(tmp_path):
    with two_hosts() as hosts:
        wrong = f"{hosts.addresses[0]}:{_free_port()}"  # nothing listens there: node 0 was never started
        node = _node(hosts.prefixes[1], 1, wrong, "--rendezvous-timeout", "4", str(SESSION_TRAIN))
        _out, err = node.communicate(timeout=120)
    assert node.returncode == 1, err
    assert f"node 1 gave up waiting for node 0 at {wrong}" in err.strip().splitlines()[-1]


@pytest.mark.slow
@requires("tensorflow", "tf_keras")
def test_multiworker_on_two_hosts_builds_one_cluster_and_trains_the_one_process_model(tmp_path):
    """TF_CONFIG across nodes: each launcher publishes its workers' addresses at --master and reads the others'."""
    ref = plain(tmp_path / "plain", "--loss", "mse")
    with two_hosts() as hosts:
        master = f"{hosts.addresses[0]}:{_free_port()}"
        nodes = [subprocess.Popen([*hosts.prefixes[r], sys.executable, "-m", "paratrain.cli.main", "run", "-s",
                                   "multiworker", "-n", "1", "--nnodes", "2", "--node-rank", str(r), "--master",
                                   master, KERAS_EQUIV, str(tmp_path / "mw"), "--loss", "mse"],
                                  cwd=ROOT, env=tf_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in (0, 1)]
        outputs = [n.communicate(timeout=240) for n in nodes]
    assert [n.returncode for n in nodes] == [0, 0], outputs
    loss, weight = diffs(ref, tmp_path / "mw")
    assert loss <= TOL and weight <= TOL, (loss, weight)
