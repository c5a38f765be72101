"""horovodrun, called in-process, leaves nothing of its own behind when the job ends."""

import os
import threading

import pytest

from paratrain.errors import LaunchError
from paratrain.launcher.config import RunConfig
from paratrain.launcher.plan import build_plan, execute
from tests.helpers.launch import ROOT
from tests.helpers.requirements import requires

pytestmark = [pytest.mark.multiprocess, requires("horovod")]


def _serving() -> list[str]:
    return [t.name for t in threading.enumerate() if "serve_forever" in t.name]


@pytest.mark.parametrize("fails", [False, True], ids=["succeeds", "fails"])
def test_the_rendezvous_server_is_shut_when_the_job_ends(fails):
    """Left serving, its daemon thread woke during interpreter shutdown and half-printed "Exception in thread" over
    the job's last line (and its port stayed open for the rest of the process)."""
    before = _serving()
    saved = dict(os.environ)  # execute() sets the job's environment in this process, as the CLI does
    try:
        script = "exit3.py" if fails else "print_args.py"  # exit3: rank 1 of 2 exits with 3
        plan = build_plan(RunConfig(strategy="horovod", nproc=2, script=str(ROOT / "tests/helpers/scripts" / script)))
        if fails:
            with pytest.raises(LaunchError, match="rank 1"):
                execute(plan)
        else:
            assert execute(plan) == 0
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert _serving() == before


LEAK = """
import multiprocessing, os, sys
from paratrain.launcher.horovodrun import _quiet_resource_tracker
if sys.argv[1] == "quiet":
    _quiet_resource_tracker()
leaked = multiprocessing.get_context("spawn").Semaphore()  # what horovodrun's runner leaves behind now and then
os._exit(0)
"""


@pytest.mark.parametrize("mode", ["plain", "quiet"])
def test_the_resource_tracker_says_nothing_after_the_jobs_last_line(mode):
    """Its 'leaked semaphore objects' warning came from its own process after the launcher had printed its last line
    (CI's one failure, in a horovod job); the launcher starts it with its warnings ignored. The plain case shows the
    check can fail."""
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", LEAK, mode], stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # the tracker outlives the process by a moment, writing to the same stderr
    stderr = proc.communicate(timeout=60)[1]
    assert ("leaked semaphore" in stderr) == (mode == "plain"), stderr
