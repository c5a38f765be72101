"""multiworker: one process per worker with its TF_CONFIG, equal to one process; killed jobs resume."""

from __future__ import annotations

import pytest

from tests.helpers.keras import TOL, diffs, plain, replicas, tf_env, under, weight_diff
from tests.helpers.launch import EXAMPLES, ROOT, check, paratrain
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow", "tf_keras"), pytest.mark.slow, pytest.mark.multiprocess]


@pytest.fixture(scope="module")
def mse_ref(tmp_path_factory):
    return plain(tmp_path_factory.mktemp("keras") / "plain", "--loss", "mse")


def test_two_workers_match_one_process(tmp_path, mse_ref):
    proc = check(under("multiworker", 2, tmp_path / "mw", "--loss", "mse"))
    assert replicas(tmp_path / "mw") == 2
    assert "multiworker × 2 processes, 2 replicas (CPU) finished in" in proc.stderr, proc.stderr
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


def test_workers_without_a_multiworker_strategy_are_named_as_independent_copies():
    """Each worker trained alone under TensorFlow's default strategy: not one multiworker job, and the line says so."""
    script = ROOT / "tests" / "helpers" / "scripts" / "keras_own_mirrored.py"
    proc = check(paratrain("run", "-s", "multiworker", "-n", "2", str(script), "--default", env=tf_env(), timeout=240))
    assert proc.stdout.count("fit done") == 2, proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert "2 independent copies of keras_own_mirrored.py ran (" in last and "not one multiworker job" in last, last
    assert "never built a strategy spanning the workers" in last
