"""A failed job's last line names the cause (the first line of a multi-line message, not its advice), and a signal
that reaches ranks while they handle a failure never shows paratrain's own traceback."""

import importlib.util
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.launch import ROOT, paratrain, worker_env
from tests.helpers.requirements import requires

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "failing_peers.py")
PACKAGE = str(Path(importlib.util.find_spec("paratrain").origin).resolve().parent)  # as the workers import it
CAUSE = "ImportError: Extension horovod.tensorflow has not been built: /site-packages/horovod/tensorflow/mpi_lib.so " \
        "not found"
STRATEGIES = ["ddp", pytest.param("horovod", marks=requires("horovod"))]
pytestmark = pytest.mark.multiprocess


def _ours(output: str) -> list[str]:
    """Traceback frames in paratrain's own modules (the user's traceback starts at their script, as under python)."""
    frames = re.findall(r'File "([^"]+)", line \d+', output)
    return [f for f in frames if str(Path(f).resolve()).startswith(PACKAGE + "/")]


def _assert_no_traceback_of_ours(output: str) -> None:
    assert not _ours(output), output
    assert "partially initialized" not in output and "circular import" not in output, output


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_error_line_names_the_cause_of_a_multi_line_message(tmp_path, strategy):
    """Rank 1's message is a cause, then advice; rank 0 fails after it and is stopped while it handles that."""
    proc = paratrain("run", "-s", strategy, "-n", "2", SCRIPT, "0", str(tmp_path), timeout=150)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"paratrain: error: rank 1 failed first (exit code 1): {CAUSE}", last
    assert "reinstall Horovod" in proc.stdout + proc.stderr  # the whole message is still in rank 1's traceback
    _assert_no_traceback_of_ours(proc.stdout + proc.stderr)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sigterm_while_ranks_handle_their_failures_shows_no_traceback_of_ours(tmp_path, strategy):
    """Both ranks have raised and are still on their way out when the job gets SIGTERM (as from a scheduler)."""
    job = subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "run", "-s", strategy, "-n", "2", SCRIPT,
                            "both", str(tmp_path)], cwd=ROOT, env=worker_env(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"failing{r}").exists() for r in (0, 1)):
            assert job.poll() is None and time.monotonic() < deadline, "the ranks never started failing"
            time.sleep(0.05)
        time.sleep(0.2)  # rank 0 is in the middle of handling its failure
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 128 + signal.SIGTERM, err
    assert "interrupted by SIGTERM; every process of the job was stopped" in err.strip().splitlines()[-1], err
    _assert_no_traceback_of_ours(out + err)
