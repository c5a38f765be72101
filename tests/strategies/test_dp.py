import pytest

from tests.helpers.launch import SESSION_TRAIN, check, paratrain

pytestmark = pytest.mark.multiprocess


def test_dp_without_gpus_says_so_once(tmp_path):
    proc = check(paratrain("run", "-s", "dp", str(SESSION_TRAIN), "--steps", "3"))
    assert proc.stderr.count("DataParallel runs as one plain process") == 1


def test_dp_refuses_several_processes(tmp_path):
    proc = paratrain("run", "-s", "dp", "--nproc", "2", str(SESSION_TRAIN))
    assert proc.returncode == 2
    assert "runs as one process" in proc.stderr and "--strategy ddp" in proc.stderr
