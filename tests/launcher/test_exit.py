"""How a rank's end is reported: a finished script never fails the job; a death during it always does, by name."""

import time

import pytest

from tests.helpers.launch import ROOT, check, paratrain

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "exit_paths.py")
pytestmark = pytest.mark.multiprocess


def test_native_script_that_leaves_its_group_up_exits_cleanly_and_runs_atexit(tmp_path):
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", SCRIPT, "left-up", str(tmp_path)))
    assert "rank 0 done" in proc.stdout and "rank 1 done" in proc.stdout
    assert (tmp_path / "atexit0").read_text() == "2.0" and (tmp_path / "atexit1").read_text() == "2.0"


@pytest.mark.parametrize(("mode", "signame", "code"), [("kill", "SIGKILL", 137), ("abort", "SIGABRT", 134)])
def test_a_signal_during_the_script_fails_the_job_by_name(tmp_path, mode, signame, code):
    start = time.monotonic()
    proc = paratrain("run", "-s", "ddp", "-n", "2", SCRIPT, mode, str(tmp_path), timeout=120)
    assert proc.returncode == code, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert f"rank 1 failed first (exit code {code}): killed by {signame}" in last
    assert "<NONE>" not in proc.stderr and "after its script had finished" not in last
    assert time.monotonic() - start < 60


def test_an_abort_after_the_script_finished_is_reported_as_such(tmp_path):
    proc = paratrain("run", "-s", "ddp", "-n", "2", SCRIPT, "abort-exit", str(tmp_path), timeout=120)
    assert proc.returncode == 134, proc.stderr
    assert "rank 1 done" in proc.stdout
    assert "killed by SIGABRT after its script had finished" in proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("body", "code", "words"), [
    ("import os\nos.abort()\n", 134, "the single process failed (exit code 134, killed by SIGABRT); its output"),
    ("import atexit, os\natexit.register(os.abort)\n", 134, "killed by SIGABRT after its script had finished"),
])
def test_one_process_methods_report_a_signal_death_by_name(tmp_path, body, code, words):
    """single/dp run in a fork of the launcher, which survives the script's crash to say what happened."""
    script = tmp_path / "crash.py"
    script.write_text(body)
    proc = paratrain("run", "-s", "single", str(script), timeout=120)
    assert proc.returncode == code, proc.stderr
    assert words in proc.stderr.strip().splitlines()[-1]


def test_one_process_methods_run_atexit_handlers_and_keep_the_exit_code(tmp_path):
    script = tmp_path / "leave.py"
    script.write_text("import atexit, sys\natexit.register(lambda: open(sys.argv[1], 'w').write('ran'))\n"
                      "sys.exit(int(sys.argv[2]))\n")
    check(paratrain("run", "-s", "single", str(script), str(tmp_path / "a"), "0"))
    assert (tmp_path / "a").read_text() == "ran"
    proc = paratrain("run", "-s", "single", str(script), str(tmp_path / "b"), "7")
    assert proc.returncode == 7 and (tmp_path / "b").read_text() == "ran"
    assert "the single process failed (exit code 7)" in proc.stderr
