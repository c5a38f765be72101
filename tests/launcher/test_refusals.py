"""A refusal — a paratrain error every rank raises alike (tp or pp that cannot split the model, a bad option) — is
said once, by the launcher, as one ``paratrain: error:`` line: not once per rank and again by the launcher, and
without torch's lines about stopping the other ranks."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers.launch import ROOT, paratrain, python

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
TRAIN = str(ROOT / "src" / "paratrain" / "workloads" / "train.py")


def _said_once(proc: subprocess.CompletedProcess, words: str) -> str:
    output = proc.stdout + proc.stderr
    lines = [line for line in output.splitlines() if words in line]
    assert len(lines) == 1, f"said {len(lines)} times:\n{output}"
    assert lines[0].startswith("paratrain: error: ") and "failed first" not in lines[0], lines[0]
    for noise in ("SIGTERM", "Terminating process", "closing signal", "Traceback"):
        assert noise not in output, output
    return lines[0]


@pytest.mark.multiprocess
@pytest.mark.parametrize(("strategy", "argv", "words"), [
    ("tp", [TRAIN, "--workload", "mlp", "--steps", "2"], "--strategy tp cannot split Sequential"),
    ("pp", [str(SCRIPTS / "options_train.py"), "{out}", "2", "--explicit"], "model(x) cannot train"),
])
def test_a_refusal_every_rank_raises_is_one_line(tmp_path, strategy, argv, words):
    proc = paratrain("run", "-s", strategy, "-n", "2", *(a.format(out=tmp_path) for a in argv))
    assert proc.returncode == 2, proc.stderr
    _said_once(proc, words)


@pytest.mark.multiprocess
def test_a_one_process_refusal_is_one_line():
    proc = paratrain("run", "-s", "single", str(SCRIPTS / "bad_op.py"))
    assert proc.returncode == 2, proc.stderr
    _said_once(proc, 'all_reduce op "avg" is not one of')


@pytest.mark.multiprocess
def test_under_plain_torchrun_each_rank_still_says_its_error():
    """No paratrain launcher reads the ranks' notes there, so the line is each rank's to say."""
    proc = python("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "--module",
                  "paratrain.launcher.worker", str(SCRIPTS / "bad_op.py"))
    assert proc.returncode != 0
    assert 'paratrain: error (rank 0): all_reduce op "avg" is not one of' in proc.stderr, proc.stderr


def test_a_rank_with_another_cause_of_its_own_keeps_the_rank_in_the_line(tmp_path):
    """Only an error the ranks said alike loses its rank; a rank that failed otherwise is named as before."""
    from paratrain.launcher.job import refused

    def note(rank: int, seconds: float, error: str, **extra: object) -> None:
        (tmp_path / f"rank{rank}.failure.json").write_text(json.dumps(
            {"rank": rank, "time": seconds, "error": error, "code": 2, **extra}))

    note(0, 1.0, "tp cannot split Sequential", user_error=True)
    note(1, 2.0, "RuntimeError: Connection closed by peer")  # an echo: not a cause of its own
    error = refused(tmp_path)
    assert error is not None and error.one_line() == "tp cannot split Sequential" and error.exit_code == 2
    note(1, 2.0, "RuntimeError: boom")
    assert refused(tmp_path) is None
