"""The bundled workloads train and evaluate through the Session, exactly-once evaluation included."""

from __future__ import annotations

import re

import pytest

from paratrain.workloads import WORKLOADS, get
from tests.helpers.launch import ROOT, check, paratrain

pytestmark = pytest.mark.multiprocess
TRAIN = str(ROOT / "src" / "paratrain" / "workloads" / "train.py")
RESULT = re.compile(r"(\w+) (\S+)×(\d): loss ([\d.]+) (accuracy|perplexity) ([\d.]+)")


def test_every_workload_builds_with_a_test_set_and_a_score():
    for name in WORKLOADS:
        built = get(name).build()
        x, y = built.test[0]
        out = built.model(x.unsqueeze(0))
        sums = built.score(out, y.unsqueeze(0))
        assert set(built.finish(sums)) & {"accuracy", "perplexity"}


@pytest.mark.parametrize("method", ["single", "fsdp"])
def test_the_cnn_evaluates_on_every_rank_under_a_sharded_method(method):
    """fsdp×2 evaluates the cnn through session.prepare_eval (every forward a collective) and finishes; the
    accuracy covers the whole test set."""
    nproc = "1" if method == "single" else "2"
    proc = check(paratrain("run", "--strategy", method, "--nproc", nproc, TRAIN, "--workload", "cnn", "--steps", "15"))
    found = RESULT.search(proc.stdout)
    assert found and found.group(1) == "cnn" and 0.3 < float(found.group(6)) <= 1, proc.stdout
