"""Horovod behind the Session, launched by horovodrun: the same curve as one process, checkpoints across methods,
native horovodrun scripts unchanged, and a dead or stuck worker named. Real Horovod (Gloo) on CPU; `make test`
builds it with `paratrain setup horovod`."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, max_diffs, paratrain, worker_env

pytestmark = pytest.mark.multiprocess
if os.environ.get("CI") != "true":  # in CI it must be there (make test builds it): a missing one fails
    pytest.importorskip("horovod")

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"


def test_clipping_clips_the_synchronised_gradients(tmp_path, reference):
    """Clipping needs the averaged gradients first (Horovod's optimizer synchronises inside step). SGD: Adam's update
    hardly depends on the gradient's scale, so clipping would barely show there. (Accumulation, Horovod's
    backward_passes_per_step, is in tests/strategies/test_conformance.py.)"""
    for method, nproc in (("horovod", 2), ("single", 1)):
        check(paratrain("run", "-s", method, "-n", str(nproc), "--grad-clip", "0.05", str(SESSION_TRAIN),
                        "--optimizer", "sgd", "--steps", "100", "--out", str(tmp_path / f"{method}_clip")))
    clipped = tmp_path / "horovod_clip"
    assert_equivalent(tmp_path / "single_clip", clipped)
    _, weight = max_diffs(reference("sgd", 100), clipped)
    assert weight > 1e-4  # the clip really changed the run


def test_a_ddp_checkpoint_resumes_under_horovod(tmp_path, reference):
    """(Horovod's own checkpoints resume under single in tests/strategies/test_conformance.py.)"""
    train("ddp", 2, tmp_path / "ddp100", "adamw", 100, "--save", str(tmp_path / "ddp_ckpt"))
    resumed = train("horovod", 2, tmp_path / "hvd", "adamw", 200, "--load", str(tmp_path / "ddp_ckpt"))
    loss, weight = max_diffs(reference("adamw"), resumed, offset=100)
    assert loss <= 1e-5 and weight <= 1e-5, (loss, weight)


def test_a_native_horovodrun_script_runs_unchanged_with_the_same_result(tmp_path):
    script = str(SCRIPTS / "hvd_native.py")
    proc = check(paratrain("run", "-s", "horovod", "-n", "2", script, str(tmp_path / "ours")))
    assert "rank 0 of 2 done" in proc.stdout and "rank 1 of 2 done" in proc.stdout
    theirs = subprocess.run([sys.executable, "-m", "horovod.runner.launch", "-np", "2", "-H", "localhost:2", "--gloo",
                             sys.executable, script, str(tmp_path / "theirs")], capture_output=True, text=True,
                            timeout=240, cwd=ROOT, env=worker_env())
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert max_diffs(tmp_path / "theirs", tmp_path / "ours") == (0.0, 0.0)


def test_the_handwritten_baseline_matches_one_process_with_adamw(tmp_path, reference):
    # examples/handwritten/horovod.py is the seed's snippet made runnable: benchmarks/ measure paratrain against it
    out = tmp_path / "hand"
    check(paratrain("run", "-s", "horovod", "-n", "2", str(ROOT / "examples" / "handwritten" / "horovod.py"),
                    "--optimizer", "adamw", "--steps", "200", "--out", str(out)))
    assert_equivalent(reference("adamw"), out)


def _run(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = paratrain("run", *args, timeout=timeout)
    return proc, time.monotonic() - start


@pytest.mark.parametrize(("mode", "code", "words"), [
    ("kill", 137, "rank 1 failed first (exit code 137, killed by SIGKILL)"),
    ("exit", 3, "rank 1 failed first (exit code 3)"),
])
def test_a_dead_worker_ends_the_job_naming_it(tmp_path, mode, code, words):
    proc, took = _run("-s", "horovod", "-n", "2", str(SCRIPTS / "lockstep.py"), mode, str(tmp_path))
    assert proc.returncode == code, proc.stderr[-2000:]
    assert words in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr.strip().splitlines()[-1]
    assert took < 60


def test_a_stuck_worker_is_stopped_at_the_stall_timeout(tmp_path):
    proc, took = _run("-s", "horovod", "-n", "2", "--stall-timeout", "4", str(SCRIPTS / "lockstep.py"), "sleep",
                      str(tmp_path))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "no progress for 4 s (--stall-timeout)" in last and "rank 1 (host" in last, last
    assert took < 60


def test_what_horovod_cannot_do_here_is_a_clear_error():
    for args, words in ((["-s", "horovod:adasum", "-n", "2"], "Adasum on CPU needs MPI"),
                        (["-s", "horovod", "-n", "2", "--precision", "bf16-true"], "does not support precision"),
                        (["-s", "horovod", "-n", "2", "--max-restarts", "1"], "--max-restarts is torchrun's")):
        proc = paratrain("run", *args, str(SESSION_TRAIN), "--steps", "2")
        assert proc.returncode != 0 and words in proc.stderr, proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr


def test_a_scheduler_built_before_prepare_keeps_its_schedule_without_a_false_warning(tmp_path):
    """hvd.DistributedOptimizer is a new optimizer object: torch's scheduler, bound to the user's, never saw it step
    and every rank warned "lr_scheduler.step() before optimizer.step()" although the schedule was right."""
    runs = {}
    for method, nproc in (("single", "1"), ("horovod", "2")):
        proc = check(paratrain("run", "-s", method, "-n", nproc, str(SCRIPTS / "lr_schedule.py"),
                               str(tmp_path / f"{method}.json")))
        assert "lr_scheduler.step()" not in proc.stdout + proc.stderr, proc.stderr
        runs[method] = json.loads((tmp_path / f"{method}.json").read_text())
    assert runs["horovod"]["lrs"] == runs["single"]["lrs"] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.025]
    assert runs["horovod"]["last_lr"] == runs["single"]["last_lr"]
    assert max(abs(a - b) for a, b in zip(runs["horovod"]["losses"], runs["single"]["losses"], strict=True)) < 1e-5
