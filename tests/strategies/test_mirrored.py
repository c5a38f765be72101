"""mirrored: one process, N replicas (logical CPU devices here), equal to the same Keras model without a strategy;
a native script that builds its own MirroredStrategy gets them too, and the last line says what ran."""

from __future__ import annotations

import pytest

from tests.helpers.keras import TOL, diffs, plain, replicas, tf_env, under
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow"), pytest.mark.slow, pytest.mark.multiprocess]
OWN_MIRRORED = str(ROOT / "tests" / "helpers" / "scripts" / "keras_own_mirrored.py")


def test_mirrored_two_replicas_match_one_process(tmp_path):
    ref = plain(tmp_path / "plain", "--loss", "ce")
    proc = check(under("mirrored", 2, tmp_path / "mirrored", "--loss", "ce"))
    assert replicas(tmp_path / "mirrored") == 2, "--nproc 2 must give two replicas on a CPU-only machine"
    loss, weight = diffs(ref, tmp_path / "mirrored")
    assert loss <= TOL and weight <= TOL, (loss, weight)
    assert "mirrored × 2 replicas (CPU) finished in" in _last(proc), proc.stderr


def _last(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def _own(*args: str):
    return check(paratrain("run", "-s", "mirrored", "-n", "2", OWN_MIRRORED, *args, env=tf_env(), timeout=180))


def test_a_script_with_its_own_mirrored_strategy_gets_the_replicas_asked_for():
    """The issue's script: MirroredStrategy() after a first op, no ptf.strategy(). The worker split the CPU when
    the script imported TensorFlow, so it trains two replicas, and the last line reads that back from the job."""
    proc = _own()
    assert "replicas in sync: 2" in proc.stdout and "fit done" in proc.stdout, proc.stdout
    last = _last(proc)
    assert "mirrored × 2 replicas (CPU) finished in" in last and "asked for" not in last, proc.stderr


def test_ptf_strategy_after_the_first_op_finds_the_replicas_already_there():
    proc = _own("--ptf-late")
    assert "replicas in sync: 2" in proc.stdout, proc.stdout + proc.stderr
    assert "mirrored × 2 replicas (CPU) finished in" in _last(proc), proc.stderr


def test_a_script_on_the_default_strategy_is_reported_as_one_replica():
    """What ran, not the flag: the script never built a strategy, so one replica trained, and the line says so."""
    proc = _own("--default")
    assert "replicas in sync: 1" in proc.stdout, proc.stdout
    last = _last(proc)
    assert "mirrored × 1 replica (CPU) finished in" in last, proc.stderr
    assert "--nproc asked for 2, TensorFlow's default strategy had 1" in last


def test_a_torch_session_under_mirrored_is_one_clear_line():
    proc = paratrain("run", "-s", "mirrored", str(SESSION_TRAIN))
    assert proc.returncode == 2, proc.stderr
    assert "mirrored is a TensorFlow method" in proc.stderr and "ptf.strategy()" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_script_that_never_imports_tensorflow_reports_no_replicas():
    """No strategy was ever seen, so no number is made up from the flag."""
    script = str(ROOT / "tests" / "helpers" / "scripts" / "print_args.py")
    proc = check(paratrain("run", "-s", "mirrored", "-n", "2", script, "x", env=tf_env(), timeout=60))
    assert "mirrored, replicas not reported (CPU) finished in" in _last(proc), proc.stderr
