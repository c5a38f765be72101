"""The job's last line says what the script really built, not what --strategy asked for: a plain torch.distributed
script that never builds a DistributedDataParallel (or an FSDP module, a DeepSpeed engine) is not reported as a ddp
(fsdp, deepspeed) job; one that builds it — itself or through its Session — is."""

from __future__ import annotations

import pytest

from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain
from tests.helpers.requirements import requires

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
pytestmark = pytest.mark.multiprocess


def _last(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_a_script_that_only_all_reduces_is_not_called_a_ddp_job(tmp_path):
    """It joins a gloo group, all-reduces and destroys the group: torch.distributed ran, DDP never did."""
    last = _last(check(paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "unported.py"), "init-destroy",
                                 str(tmp_path))))
    assert "ddp ×" not in last, last
    assert last.startswith("paratrain: torch.distributed (gloo) × 2 processes (CPU) finished in"), last
    assert last.endswith("no DistributedDataParallel was built, so --strategy ddp applied only the launch"), last


def test_a_script_that_wraps_its_model_in_ddp_itself_is_a_ddp_job():
    last = _last(check(paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "native_ddp.py"))))
    assert last.startswith("paratrain: ddp × 2 processes (CPU) finished in") and "applied only" not in last, last


def test_under_fsdp_a_scripts_own_ddp_is_named_as_what_ran():
    last = _last(check(paratrain("run", "-s", "fsdp", "-n", "2", str(SCRIPTS / "native_ddp.py"))))
    assert "fsdp ×" not in last, last
    assert last.startswith("paratrain: ddp (the script's own DistributedDataParallel) × 2 processes"), last
    assert last.endswith("no FSDP module was built, so --strategy fsdp applied only the launch"), last


@pytest.mark.parametrize("strategy", ["fsdp", pytest.param("deepspeed:zero2", marks=requires("deepspeed"))])
def test_a_session_that_prepares_its_model_is_the_methods_job(tmp_path, strategy):
    """The Session builds the method's object (fully_shard; deepspeed.initialize, after the Session checked that
    DeepSpeed is installed — a look-up that must not stop the worker from watching the import that follows)."""
    last = _last(check(paratrain("run", "-s", strategy, "-n", "2", str(SESSION_TRAIN), "--steps", "2",
                                 "--out", str(tmp_path))))
    assert last.startswith(f"paratrain: {strategy} × 2 processes (CPU) finished in") and "applied only" not in last, \
        last


@requires("deepspeed")
def test_a_deepspeed_script_that_builds_no_engine_is_not_called_a_deepspeed_job(tmp_path):
    """It only forms its process group through deepspeed.init_distributed (no deepspeed.initialize)."""
    last = _last(check(paratrain("run", "-s", "deepspeed", "-n", "2", str(SCRIPTS / "ds_init_only.py"),
                                 str(tmp_path))))
    assert "deepspeed:zero2" not in last and "deepspeed ×" not in last, last
    assert last.startswith("paratrain: torch.distributed (gloo) × 2 processes (CPU) finished in"), last
    assert last.endswith("no DeepSpeed engine was built, so --strategy deepspeed applied only the launch"), last
