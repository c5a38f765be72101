"""The conformance suite: every registered PyTorch method — and a plug-in's (tests/helpers/toy_method.py) — passes the
same tests, so a new method is tested by its registry line.

Per method, at two processes (one for a one-process method), against one process written by hand
(examples/handwritten/single.py):
- the same loss curve and weights with AdamW from a model built inside ``session.init_module()`` (where a sharding
  method builds it on rank 0 alone), and a checkpoint that resumes under ``single`` on the identical curve;
- gradient accumulation with an uneven last batch (37 samples in batches of 8: ranks get 3 and 2, or a padding
  sample of zero weight) that keeps the math.
Each method's own tests (tests/strategies/test_<method>.py) cover what only it has: options, native scripts,
other world sizes, failures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from paratrain.strategies import registry
from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import ROOT, worker_env

pytestmark = pytest.mark.multiprocess
STEPS = 60  # the resumed run goes on to 2 × STEPS


@dataclass(frozen=True)
class Case:
    spec: str
    nproc: int
    env: dict[str, str] | None = field(default=None, compare=False)

    @property
    def id(self) -> str:
        return f"{self.spec}x{self.nproc}"


def _cases() -> list[Case]:
    """Every configuration compare runs by default of every torch method, plus the plug-in."""
    out = [Case(spec, 2 if entry.multi_process else 1)
           for entry in registry.entries() if entry.framework == "torch" and entry.implemented
           for spec in (entry.compare_specs or (str(entry.method),))]
    plugin = worker_env(PARATRAIN_PLUGINS="tests.helpers.toy_method", PYTHONPATH=str(ROOT))
    return [*out, Case("toy", 2, plugin)]


CASES = _cases()


@pytest.fixture(params=CASES, ids=[c.id for c in CASES])
def case(request) -> Case:
    name = request.param.spec.partition(":")[0]
    if name != "toy" and not registry.availability(name).ok and os.environ.get("CI") != "true":
        pytest.skip(f"{name} is not available here: {registry.availability(name).reason}")
    return request.param  # in CI every method `make test` installs must be there: the run fails instead


def test_trains_the_one_process_curve_and_resumes_under_single(case, tmp_path, reference):
    ckpt = tmp_path / "ckpt"
    first = train(case.spec, case.nproc, tmp_path / "first", "adamw", STEPS, "--save", str(ckpt), "--init-module",
                  env=case.env)
    assert_equivalent(reference("adamw", steps=STEPS), first)
    resumed = train("single", 1, tmp_path / "resumed", "adamw", 2 * STEPS, "--load", str(ckpt))
    assert_equivalent(reference("adamw", steps=2 * STEPS), resumed, offset=STEPS)


def test_accumulation_with_an_uneven_last_batch_keeps_the_math(case, tmp_path, reference):
    run = train(case.spec, case.nproc, tmp_path, "sgd", 40, "--grad-accum", "2", "--samples", "37",
                "--batch-size", "8", env=case.env)
    # The per-step curve of unequal chunks is a mean of per-rank means: the weights are the contract.
    assert_equivalent(reference("sgd", steps=40, samples=37, batch_size=8), run, check_loss=False)


def test_every_torch_method_is_in_the_suite():
    """A method added to the registry is conformance-tested without a line here."""
    names = {c.spec.partition(":")[0] for c in CASES}
    assert {str(e.method) for e in registry.entries() if e.framework == "torch" and e.implemented} <= names
