"""A job started by ``paratrain run`` starts and stops as one started by the native launcher: a finished script's
job always ends, each rank draws its own random numbers, and a signal at any moment of start-up stops every
process of the job with one line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from tests.helpers.launch import ROOT, SESSION_TRAIN, paratrain, python, worker_env
from tests.helpers.requirements import requires

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
pytestmark = [pytest.mark.multiprocess, pytest.mark.first]

RUNS = 30  # jobs of each script: an exit hang seen in 3 runs of 6 must not slip through
JOB_BOUND_S = 150  # a two-rank job here takes seconds; one still running after this has hung


def _start(*args: str) -> subprocess.Popen:
    """The CLI in its own session, as a terminal's foreground job is: every process it starts shares the session."""
    return subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", *args], cwd=ROOT, env=worker_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _left_behind(session: int) -> list[psutil.Process]:
    def in_session(proc: psutil.Process) -> bool:
        try:
            return os.getsid(proc.pid) == session
        except OSError:
            return False

    return [p for p in psutil.process_iter() if in_session(p)]


def _finish(job: subprocess.Popen, timeout: float) -> tuple[int | None, str, str]:
    """Wait for the job; a job still running after ``timeout`` is killed with everything it started."""
    try:
        out, err = job.communicate(timeout=timeout)
        return job.returncode, out, err
    except subprocess.TimeoutExpired:
        for proc in _left_behind(job.pid):
            proc.kill()
        out, err = job.communicate()
        return None, out, err


@pytest.fixture
def busy_machine():
    """A core kept busy beside the jobs, as another test worker or a user's other work keeps it."""
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    burner.kill()
    burner.wait()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["native", "session"])
def test_every_finished_job_ends(busy_machine, tmp_path, kind):
    """A finished DDP script's job ends, every time, on a busy machine: a plain torchrun-style script (its model a
    module-level global, as in most scripts) and a Session script, 30 jobs each, three at a time."""

    def one(i: int) -> tuple[int, int | None, str]:
        script = ([str(SCRIPTS / "native_ddp.py")] if kind == "native"
                  else [str(SESSION_TRAIN), "--steps", "3", "--out", str(tmp_path / str(i))])
        code, _, err = _finish(_start("run", "-s", "ddp", "-n", "2", *script), JOB_BOUND_S)
        return i, code, err.strip().splitlines()[-1] if err.strip() else ""

    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(one, range(RUNS)))
    failed = [o for o in outcomes if o[1] != 0]
    assert not failed, f"{len(failed)} of {RUNS} jobs did not end with exit 0 (None: still running after " \
                       f"{JOB_BOUND_S} s): {failed[:5]}"
    assert all("ddp × 2 processes (CPU) finished" in last for _, _, last in outcomes), outcomes[:3]


def _draws(output: str) -> dict[int, dict]:
    rows = [json.loads(line[len("RANDOM "):]) for line in output.splitlines() if line.startswith("RANDOM ")]
    return {row["rank"]: row for row in rows}


def test_each_rank_draws_random_numbers_as_under_torchrun():
    """Each process torchrun starts seeds its generators afresh: Python's and numpy's from the system's entropy,
    and this torch's too. Whether a generator's first draws agree across the ranks is the same under paratrain as
    under torchrun, generator by generator (ranks forked from one parent all drew the same numbers)."""
    script = str(SCRIPTS / "random_state.py")
    ours = paratrain("run", "-s", "ddp", "-n", "2", script)
    native = python("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script)
    assert ours.returncode == 0 and native.returncode == 0, ours.stderr + native.stderr
    ours_draws, native_draws = _draws(ours.stdout), _draws(native.stdout)
    assert sorted(ours_draws) == sorted(native_draws) == [0, 1], ours.stdout + native.stdout
    assert native_draws[0]["python"] != native_draws[1]["python"], native_draws  # what the check rests on
    for generator in ("python", "numpy", "torch"):
        same = {name: draws[0][generator] == draws[1][generator]
                for name, draws in (("paratrain", ours_draws), ("torchrun", native_draws))}
        assert same["paratrain"] == same["torchrun"], (generator, ours_draws, native_draws)


def _ranks_started(launcher: int) -> bool:
    """Whether a rank's process (or Horovod's middleman for one) is among the launcher's children: not a helper it
    starts first (multiprocessing's resource tracker, a check of the system's ``env``)."""
    for child in psutil.Process(launcher).children():
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "paratrain.launcher.worker" in line or "spawn_main" in line:
            return True
    return False


def _wait_for(moment: str, job: subprocess.Popen) -> None:
    """Block until the job reaches ``moment`` of its start-up."""
    if moment == "importing":  # the launcher is still importing its modules and torch
        time.sleep(0.2)
        return
    deadline = time.monotonic() + 90
    if moment == "ranks starting":  # the launcher has started the rank processes (horovodrun: their middlemen)
        while not _ranks_started(job.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        return  # the ranks' interpreters are starting: SIGINT is held until the worker can take it quietly
    assert job.stdout is not None  # "running": a rank has started the script
    while time.monotonic() < deadline:
        line = job.stdout.readline()
        if not line or "started rank" in line:  # horovodrun prefixes its workers' lines with their rank
            return


@pytest.mark.parametrize("moment", ["importing", "ranks starting", "running"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_of_start_up_stops_the_job(moment, signum):
    """Ctrl-C reaches the terminal's whole foreground group; a scheduler's SIGTERM reaches the launcher alone.
    Either one, at any moment, stops every process of the job within seconds, with exit 128+N and one line."""
    _interrupt("ddp", moment, signum)


@requires("horovod")
@pytest.mark.parametrize("moment", ["ranks starting", "running"])
def test_ctrl_c_while_horovods_workers_start_stops_the_job_quietly(moment):
    """horovodrun starts each worker through a spawned middleman process, which imports the launcher's modules
    before it leaves the terminal's group: a Ctrl-C then printed an import's traceback (2 in 16 on a busy machine),
    and one while a middleman stopped its worker a thread's (5 in 10)."""
    _interrupt("horovod", moment, signal.SIGINT)


def _interrupt(method: str, moment: str, signum: int) -> None:
    job = _start("run", "-s", method, "-n", "2", str(SCRIPTS / "slow_start.py"))
    _wait_for(moment, job)
    sent = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(job.pid, signum)
    else:
        job.send_signal(signum)
    code, _, err = _finish(job, 60)
    took = time.monotonic() - sent
    left = _lingering(job.pid, str(SCRIPTS / "slow_start.py"))
    for pid in left:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
    name = signal.Signals(signum).name
    assert code == 128 + signum, f"exit {code} after {name} while {moment}:\n{err}"
    assert err.strip().splitlines()[-1].startswith(f"paratrain: error: interrupted by {name}"), err
    assert "Traceback" not in err, err
    assert not left, list(left.values())
    assert took < 30, took


def _lingering(session: int, script: str, within_s: float = 5.0) -> dict[int, str]:
    """What is still running of a job a few seconds after its launcher exited (pid: command line): the processes
    of its session, and any process running its script (torchrun and horovodrun start the ranks in sessions of
    their own)."""
    deadline = time.monotonic() + within_s
    while True:
        found = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if os.getsid(proc.pid) == session or script in (proc.info["cmdline"] or []):
                    found[proc.pid] = " ".join(proc.info["cmdline"] or [])
            except (OSError, psutil.Error):
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
