"""A multi-process launch of a script that never joins its job is named as independent copies, not as a job of the
method: the workers note whether they ever joined (a process group, even one destroyed before the end; hvd.init)."""

import pytest

from tests.helpers.launch import ROOT, check, paratrain
from tests.helpers.requirements import requires

SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "unported.py")
pytestmark = pytest.mark.multiprocess


def _last(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("strategy", "never"), [
    ("ddp", "never joined a process group (no paratrain.Session, no init_process_group)"),
    pytest.param("horovod", "never joined Horovod (no paratrain.Session, no hvd.init())", marks=requires("horovod")),
])
def test_an_unported_script_is_reported_as_independent_copies(tmp_path, strategy, never):
    proc = check(paratrain("run", "-s", strategy, "-n", "2", SCRIPT, "plain", str(tmp_path)))  # exit 0: it succeeded
    assert (tmp_path / "model.pt").is_file() and proc.stdout.count("done") == 2
    last = _last(proc)
    assert "2 independent copies of unported.py ran (" in last and f"s), not one {strategy} job" in last, last
    assert never in last and "see Port your script in the README" in last
    assert "finished" not in proc.stderr and f"{strategy} × 2 processes" not in proc.stderr


@pytest.mark.parametrize(("strategy", "mode", "shown"), [
    ("ddp", "init-destroy", "torch.distributed (gloo)"), ("ddp", "store-destroy", "torch.distributed (gloo)"),
    pytest.param("horovod", "hvd-init-shutdown", "horovod", marks=requires("horovod")),
])
def test_a_script_that_joined_and_left_before_its_end_is_one_job(tmp_path, strategy, mode, shown):
    """One job, though not a ddp one: the script all-reduces and never builds a DistributedDataParallel
    (tests/launcher/test_built.py)."""
    proc = check(paratrain("run", "-s", strategy, "-n", "2", SCRIPT, mode, str(tmp_path)))
    assert f"{shown} × 2 processes (CPU) finished in" in _last(proc), proc.stderr
    assert "independent" not in proc.stderr


def test_one_process_is_never_called_independent(tmp_path):
    proc = check(paratrain("run", "-s", "single", SCRIPT, "plain", str(tmp_path)))
    assert "single × 1 process (CPU) finished in" in _last(proc) and "independent" not in proc.stderr
