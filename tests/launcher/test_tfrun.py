"""The TensorFlow launcher: a dead worker, a taken port and a worker that never joins each end the job in one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.keras import KERAS_EQUIV, tf_env, under
from tests.helpers.launch import paratrain
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow", "tf_keras"), pytest.mark.slow, pytest.mark.multiprocess]


def test_killed_worker_stops_the_job_and_is_named(tmp_path):
    start = time.monotonic()
    proc = under("multiworker", 2, tmp_path / "out", "--die-rank", "0", "--die-epoch", "1", timeout=120)
    assert proc.returncode == 137, proc.stderr
    assert "worker 0 failed first (exit code 137, killed by SIGKILL)" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 60


def _held_after_a_free_port() -> tuple[socket.socket, int]:
    """A listening socket on port P+1 with P free, both below the kernel's ephemeral range: a port picked by binding
    0 comes from that range, where another test's connection can take P before the launch checks it."""
    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ranges.read_text().split()[0]) if ranges.exists() else 32768  # Linux's default elsewhere
    for port in range(low - 4000, low - 2, 2):
        held = socket.socket()
        try:
            held.bind(("", port + 1))
            with socket.socket() as probe:
                probe.bind(("", port))
        except OSError:
            held.close()
            continue
        held.listen()
        return held, port + 1
    raise AssertionError("no free pair of ports below the ephemeral range")


def test_taken_port_is_refused_before_anything_starts(tmp_path):
    held, port = _held_after_a_free_port()
    with held:
        proc = paratrain("run", "-s", f"multiworker:port={port - 1}", "-n", "2", KERAS_EQUIV, str(tmp_path),
                         env=tf_env(), timeout=60)
    assert proc.returncode != 0
    assert f"port {port} for worker 1 is already in use" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_worker_that_never_joins_is_named_at_the_start_up_deadline(tmp_path):
    start = time.monotonic()
    proc = under("multiworker", 2, tmp_path / "out", "--stall-rank", "1", flags=("--rendezvous-timeout", "20"),
                 timeout=120)
    assert proc.returncode != 0
    assert "did not form within the 20 s start-up deadline" in proc.stderr, proc.stderr
    assert "worker(s) 1 never reached ptf.strategy()" in proc.stderr
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("-s", "multiworker", "--max-restarts", "1"), "BackupAndRestore"),
        (("-s", "mirrored", "--precision", "bf16-mixed"), "--precision: training options of the PyTorch Session"),
        (("-s", "mirrored", "--nnodes", "2", "--master", "h:1"), "mirrored runs in one process on one machine"),
        (("-s", "multiworker:collective=gloo",), 'collective="gloo" is not one of auto, ring, nccl'),
    ],
)
def test_what_the_tensorflow_methods_cannot_do_is_refused(flags, message, tmp_path):
    proc = paratrain("run", *flags, KERAS_EQUIV, str(tmp_path), env=tf_env(), timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_interrupting_the_launcher_stops_every_worker(tmp_path):
    out = tmp_path / "interrupted"
    launcher = subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "run", "-s", "multiworker", "-n", "2",
                                 KERAS_EQUIV, str(out), "--epochs", "500"], env=tf_env(), stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    try:
        time.sleep(15)  # TensorFlow imported, the job formed, training under way
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 130, err
    assert "interrupted by SIGINT; every process of the job was stopped" in err
    left = subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.split()
    assert not left, f"workers left running: {left}"


TF_START_UP = ("absl::InitializeLog", "oneDNN custom operations", "cpu_feature_guard")


def test_a_quiet_run_prints_none_of_tensorflows_start_up_lines():
    """`import tensorflow` writes absl's pre-initialisation warning and the oneDNN notice twice per process (two of
    its libraries carry a copy each), past TF_CPP_MIN_LOG_LEVEL: a quiet run must show none of them."""
    from tests.helpers.launch import EXAMPLES, check, worker_env

    env = {k: v for k, v in worker_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}  # the launcher's default
    proc = check(paratrain("run", "-s", "multiworker", "-n", "2", str(EXAMPLES / "keras_train.py"), "--epochs", "1",
                           "--samples", "256", "--width", "16", env=env, timeout=180))
    noise = [ln for ln in proc.stderr.splitlines() if any(marker in ln for marker in TF_START_UP)]
    assert noise == [], proc.stderr
    assert "loss" in proc.stdout and "multiworker × 2 processes" in proc.stderr
