"""Never a silent hang: a rank that leaves the lock-step ends the job within the configured time, and is named."""

import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers.launch import ROOT, worker_env

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
LOCKSTEP = str(SCRIPTS / "lockstep.py")
pytestmark = pytest.mark.multiprocess


def run(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "paratrain.cli.main", "run", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=worker_env())
    return proc, time.monotonic() - start


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_rank_exiting_mid_step_ends_the_job_naming_it(tmp_path):
    proc, took = run("-s", "ddp", "-n", "2", LOCKSTEP, "exit", str(tmp_path))
    assert proc.returncode == 3
    assert "rank 1 failed first (exit code 3)" in last_line(proc)
    assert took < 15 + 10  # + interpreter and torch start-up of the launcher and two workers on 2 cores


def test_rank_sleeping_inside_a_step_is_stopped_at_the_stall_timeout(tmp_path):
    proc, took = run("-s", "ddp", "-n", "2", "--stall-timeout", "4", LOCKSTEP, "sleep", str(tmp_path))
    line = last_line(proc)
    assert proc.returncode == 1, proc.stderr
    assert "no progress for 4 s (--stall-timeout)" in line
    assert "rank 1 (host" in line and "left the lock-step" in line and "after step 4" in line
    assert "rank 0 is waiting in session.backward" in line
    assert took < 60


def test_skipped_collective_is_an_error_within_the_timeout_not_a_hang(tmp_path):
    proc, took = run("-s", "ddp", "-n", "2", "--timeout", "6", LOCKSTEP, "skip", str(tmp_path))
    assert proc.returncode != 0
    assert "failed first" in last_line(proc) or "left the lock-step" in last_line(proc)
    assert took < 60


@pytest.mark.parametrize("flag", ["--stall-timeout", "--timeout"])
def test_main_rank_evaluating_alone_under_fsdp_is_named(tmp_path, flag):
    proc, took = run("-s", "fsdp", "-n", "2", flag, "6", LOCKSTEP, "eval", str(tmp_path))
    line = last_line(proc)
    assert proc.returncode == 1, proc.stderr
    assert "rank 0 (host" in line and "left the lock-step" in line, line
    assert "rank 1 is waiting in session.save" in line
    assert "HINT: every rank must make the same collective calls" in line
    assert took < 70


@pytest.mark.parametrize(("strategy", "nproc"), [("ddp", 2), ("single", 1), ("horovod", 2)])
def test_ctrl_c_stops_every_process_within_seconds_with_one_line(tmp_path, strategy, nproc):
    pids = tmp_path / "pids"
    pids.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "run", "-s", strategy, "-n", str(nproc),
                             str(SCRIPTS / "wait_forever.py"), str(pids)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=worker_env())
    deadline = time.monotonic() + 90
    while len(list(pids.iterdir())) < nproc and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(list(pids.iterdir())) == nproc, "workers did not start"
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _out, err = proc.communicate(timeout=30)
    took = time.monotonic() - start
    assert proc.returncode == 130, err
    assert took < 8, f"took {took:.1f} s to stop"
    # horovodrun forwards the workers' own output as "[rank]<stderr>:…" (a peer's Horovod may log the closed
    # connection as it goes): paratrain's own output is the one line
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith(("[0]<", "[1]<"))]
    assert lines == ["paratrain: error: interrupted by SIGINT; every process of the job was stopped"], err
    assert "Traceback" not in err and "SignalException" not in err
    alive = [int(p.name) for p in pids.iterdir() if psutil.pid_exists(int(p.name))
             and psutil.Process(int(p.name)).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"workers still running: {alive}"
