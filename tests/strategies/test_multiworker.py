"""multiworker: one process per worker with its TF_CONFIG, equal to one process; killed jobs resume."""

from __future__ import annotations

import pytest

from tests.helpers.keras import TOL, diffs, plain, replicas, tf_env, under, weight_diff
from tests.helpers.launch import EXAMPLES, check, paratrain
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow", "tf_keras"), pytest.mark.slow, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def mse_ref(tmp_path_factory):
    return plain(tmp_path_factory.mktemp("keras") / "plain", "--loss", "mse")


def test_two_workers_match_one_process(tmp_path, mse_ref):
    check(under("multiworker", 2, tmp_path / "mw", "--loss", "mse"))
    assert replicas(tmp_path / "mw") == 2
    loss, weight = diffs(mse_ref, tmp_path / "mw")
    assert loss <= TOL and weight <= TOL, (loss, weight)


def test_killed_worker_resumes_from_backup_and_restore(tmp_path, mse_ref):
    backup = tmp_path / "backup"
    first = under("multiworker", 2, tmp_path / "first", "--loss", "mse", "--die-rank", "1", "--die-epoch", "2",
                  flags=("--checkpoint-dir", str(backup), "--checkpoint-every", "8"), timeout=120)
    assert first.returncode != 0
    assert "worker 1 failed first" in first.stderr and "SIGKILL" in first.stderr, first.stderr
    assert backup.is_dir() and any(backup.iterdir()), "BackupAndRestore wrote nothing before the kill"
    check(under("multiworker", 2, tmp_path / "resumed", "--loss", "mse",
                flags=("--checkpoint-dir", str(backup), "--checkpoint-every", "8"),
                env=tf_env(KERAS_EQUIV_RESUMED="1")))
    assert weight_diff(mse_ref, tmp_path / "resumed") <= TOL


def test_native_tf_config_script_runs_unchanged(tmp_path):
    """The seed's snippet: a script that builds MultiWorkerMirroredStrategy from TF_CONFIG itself."""
    out = tmp_path / "native.json"
    proc = check(paratrain("run", "-s", "multiworker", "-n", "2", str(EXAMPLES / "handwritten" / "multiworker.py"),
                           "--epochs", "2", "--out", str(out), env=tf_env(), timeout=240))
    assert out.is_file() and '"workers": 2' in out.read_text(), proc.stdout
