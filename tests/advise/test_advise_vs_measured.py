"""advise = what runs: rank 0's measured peak and state bytes of real `compare` cells on the bundled llama, every
torch method × precision (fp32, bf16-mixed; bf16-true under the methods that run it) × activation checkpointing
mode (tests/advise/measured_llama.json, recorded on a 2-core CPU with torch 2.13 by ``python
benchmarks/advise_vs_measured.py ... --record``), against advise's model as it is now: state bytes exact, the total
within 10 %. The measurements are real runs kept as data, so the table costs the suite nothing to hold; a change to
a method's memory re-records them. A case the model does not reach yet is a strict expected failure that says why,
so the mark has to go when the model gains the term.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.requirements import requires

CASES = json.loads((Path(__file__).parent / "measured_llama.json").read_text())
TOLERANCE = 0.10
# Open (issue 43's closing note): advise's total against the measured peak, where it is more than 10 % off. None
# now. What closed them: the CPU peak ending the tensors gloo's threads free (tp and fsdp+tp had been 5-12 MiB low);
# ZeRO-1's p.grad counted as backward makes them; FSDP's units counted moment by moment (activations.Units: FSDP
# at 4 processes had been 10-15 % high, its busiest set counted beside the activations' peak); ZeRO's reduction at
# the end of backward counted as the step's other peak (memory.zero_reduction), once ZeRO's bf16 mode reduced in
# fp32 as configured. tp×4 is refused on this llama (2 key/value heads cannot be split 4 ways), so it has no cell.
_ERRORS: dict[tuple[str, int, str, str], str] = {}
OPEN = {key: f"open: advise's total {error} of the measured peak" for key, error in _ERRORS.items()}
# State bytes a method holds beyond advise's figure: DeepSpeed's engine keeps a few scalars beside its partitions (a
# gradient norm, a step count). (fsdp+tp over a 2×2 mesh held 78 B more until Adam's step counts, one per tensor on
# every rank, stopped being divided among the FSDP groups.)
STATE_SLACK = {"deepspeed": 64}


def _slack(case: dict) -> int:
    return STATE_SLACK.get(case["strategy"].partition(":")[0], 0)


def _open(case: dict) -> str | None:
    return OPEN.get((case["strategy"], case["nproc"], case["precision"], case["checkpointing"]))


def _params() -> list:
    out = []
    for case in CASES:
        reason = _open(case)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        key = f"{case['strategy']}x{case['nproc']}-{case['precision']}-{case['checkpointing']}"
        out.append(pytest.param(case, marks=marks, id=key))
    return out


def test_the_table_covers_every_torch_method_precision_and_mode():
    cells = {(c["strategy"], c["precision"], c["checkpointing"]) for c in CASES}
    assert {c[1] for c in cells} == {"fp32", "bf16-mixed", "bf16-true"}
    assert {c[2] for c in cells} >= {"none", "full", "op", "every:2"}
    assert {c[0] for c in cells} >= {"ddp", "fsdp", "deepspeed:zero2", "deepspeed:zero3", "tp", "fsdp+tp", "pp"}
    # bf16-true under every method that runs it (the others refuse it), in every mode, at 2 and 4 processes
    true16 = {(c["strategy"], c["nproc"], c["checkpointing"]) for c in CASES if c["precision"] == "bf16-true"}
    assert true16 == {(s, n, m) for s in ("ddp", "fsdp", "fsdp:shard=grad_op", "fsdp:shard=none") for n in (2, 4)
                      for m in ("none", "full", "op", "every:2")}


@requires("transformers")
def test_state_bytes_are_exact_in_every_case():
    """Every case, the open ones included: what each rank holds at rest is advise's figure to the byte (DeepSpeed's
    engine adds a few scalars beside its partitions: a gradient norm, a step count)."""
    from paratrain.bench import budget
    from paratrain.workloads import get

    for case in CASES:
        mem = budget.predict(case["strategy"], case["nproc"], workload=get("llama"), width=case["width"],
                             depth=case["depth"], precision=case["precision"],
                             checkpointing=False if case["checkpointing"] == "none" else case["checkpointing"],
                             weak=False)
        assert mem is not None and 0 <= case["state"] - mem.state <= _slack(case), case


@requires("transformers")
@pytest.mark.parametrize("case", _params())
def test_advise_is_what_the_cell_measured(case):
    from paratrain.bench import budget
    from paratrain.workloads import get

    mem = budget.predict(case["strategy"], case["nproc"], workload=get("llama"), width=case["width"],
                         depth=case["depth"], precision=case["precision"],
                         checkpointing=False if case["checkpointing"] == "none" else case["checkpointing"],
                         weak=False)
    assert mem is not None
    error = (mem.total - case["peak"]) / case["peak"]
    assert abs(error) <= TOLERANCE, f"{error:+.1%}"
