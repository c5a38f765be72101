"""Horovod's Keras binding: `--strategy horovod` runs a paratrain.tf script and a script written for horovodrun,
and N ranks train exactly what one process does."""

from __future__ import annotations

import json

import pytest

from tests.helpers.keras import diffs, plain, tf_env, under
from tests.helpers.launch import ROOT, check, paratrain, python
from tests.helpers.requirements import requires

pytestmark = [requires("horovod", "tensorflow", "tf_keras"), pytest.mark.slow, pytest.mark.multiprocess]
NATIVE = str(ROOT / "tests" / "helpers" / "scripts" / "hvd_keras_native.py")
TOL = 1e-6  # Horovod averages two half-batch gradients where one process takes the mean of the whole batch


def test_a_paratrain_tf_script_under_horovod_matches_one_process(tmp_path):
    ref = plain(tmp_path / "plain", "--loss", "ce")
    proc = check(under("horovod", 2, tmp_path / "hvd", "--loss", "ce"))
    loss, weight = diffs(ref, tmp_path / "hvd")
    assert loss <= TOL and weight <= TOL, (loss, weight)
    last = proc.stderr.strip().splitlines()[-1]
    assert "horovod × 2 processes" in last and "finished in" in last, proc.stderr


def test_a_script_written_for_horovodrun_runs_unchanged_with_the_result_of_one_process(tmp_path):
    check(python(NATIVE, str(tmp_path / "one"), env=tf_env()))
    check(paratrain("run", "-s", "horovod", "-n", "2", NATIVE, str(tmp_path / "two"), env=tf_env(), timeout=240))
    assert json.loads((tmp_path / "two" / "losses.json").read_text())["size"] == 2
    loss, weight = diffs(tmp_path / "one", tmp_path / "two")
    assert loss <= TOL and weight <= TOL, (loss, weight)
