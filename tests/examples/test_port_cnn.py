"""examples/port_cnn.py, the README's "Port your script", under every torch method — and resumed under another."""

from __future__ import annotations

import re

import pytest

from tests.helpers.launch import EXAMPLES, check, paratrain, python

pytestmark = pytest.mark.multiprocess
SCRIPT = str(EXAMPLES / "port_cnn.py")
EPOCH = re.compile(r"epoch (\d+): train loss [\d.]+  val loss [\d.]+  val acc ([\d.]+)")


def _epochs(out: str) -> dict[int, float]:
    return {int(m.group(1)): float(m.group(2)) for m in EPOCH.finditer(out)}


def test_runs_in_one_process(tmp_path):
    proc = check(python(SCRIPT, "--epochs", "1", "--ckpt-dir", str(tmp_path / "ckpt")))
    assert _epochs(proc.stdout)[1] > 0.85, proc.stdout  # one epoch of the digits: ~95 %
    assert (tmp_path / "ckpt" / "last").is_dir()


@pytest.mark.parametrize(("method", "nproc"), [("dp", "1"), ("ddp", "2"), ("fsdp", "2")])
def test_runs_under_each_method(tmp_path, method, nproc):
    proc = check(paratrain("run", "--strategy", method, "--nproc", nproc, SCRIPT, "--epochs", "1", "--ckpt-dir",
                           str(tmp_path / "ckpt"), cwd=tmp_path))
    scores = _epochs(proc.stdout)
    assert list(scores) == [1] and scores[1] > 0.85, proc.stdout + proc.stderr  # printed once, by the main rank
    if nproc == "2":  # the CPU BatchNorm notice, once per job
        assert proc.stderr.count("normalise each rank's slice of the batch") == 1, proc.stderr


def test_a_ddp_checkpoint_resumes_under_fsdp_at_the_next_epoch(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    first = check(paratrain("run", "--strategy", "ddp", "--nproc", "2", SCRIPT, "--epochs", "1", "--ckpt-dir", ckpt,
                            cwd=tmp_path))
    assert list(_epochs(first.stdout)) == [1]
    second = check(paratrain("run", "--strategy", "fsdp", "--nproc", "2", SCRIPT, "--epochs", "2", "--ckpt-dir",
                             ckpt, cwd=tmp_path))
    assert "resumed from" in second.stdout and list(_epochs(second.stdout)) == [2], second.stdout
