"""mirrored: one process, N replicas (logical CPU devices here), equal to the same Keras model without a strategy."""

from __future__ import annotations

import pytest

from tests.helpers.keras import TOL, diffs, plain, replicas, under
from tests.helpers.launch import SESSION_TRAIN, check, paratrain
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow"), pytest.mark.slow, pytest.mark.multiprocess]


def test_mirrored_two_replicas_match_one_process(tmp_path):
    ref = plain(tmp_path / "plain", "--loss", "ce")
    proc = check(under("mirrored", 2, tmp_path / "mirrored", "--loss", "ce"))
    assert replicas(tmp_path / "mirrored") == 2, "--nproc 2 must give two replicas on a CPU-only machine"
    loss, weight = diffs(ref, tmp_path / "mirrored")
    assert loss <= TOL and weight <= TOL, (loss, weight)
    assert "2 replica(s) in one process" in proc.stderr


def test_a_torch_session_under_mirrored_is_one_clear_line():
    proc = paratrain("run", "-s", "mirrored", str(SESSION_TRAIN))
    assert proc.returncode == 2, proc.stderr
    assert "mirrored is a TensorFlow method" in proc.stderr and "ptf.strategy()" in proc.stderr
    assert "Traceback" not in proc.stderr
