"""advise = what runs: rank 0's measured peak and state bytes of real `compare` cells on the bundled llama, every
torch method × precision × activation checkpointing mode (tests/advise/measured_llama.json, recorded on a 2-core
CPU with torch 2.13 by ``python benchmarks/advise_vs_measured.py ... --record``), against advise's model as it is
now: state bytes exact, the total within 10 %. The measurements are real runs kept as data, so the table costs the
suite nothing to hold; a change to a method's memory re-records them. A case the model does not reach yet is a
strict expected failure that says why, so the mark has to go when the model gains the term.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.requirements import requires

CASES = json.loads((Path(__file__).parent / "measured_llama.json").read_text())
TOLERANCE = 0.10
# Open (issue 43's closing note): advise's total against the measured peak, where it is more than 10 % off. The
# state bytes are exact in every case, these included. Some of it is the measurement: two runs of the same ZeRO-1
# bf16 cell peaked at 78.7 and 90.0 MiB, the fsdp bf16 full cell at 56.8 and 42.7. What is systematic: tp (and
# fsdp+tp, tp with FSDP over groups of one at 2 processes) holds 5-12 MiB more in a block's backward than the model
# counts.
_ERRORS = {
    ("fsdp+tp", "bf16-mixed", "every:2"): "-13.6 %",
    ("fsdp", "bf16-mixed", "full"): "-21.5 %",
    ("fsdp:shard=none", "bf16-mixed", "full"): "+10.6 %",
    ("tp", "bf16-mixed", "full"): "-11.0 %",
    ("fsdp+tp", "bf16-mixed", "full"): "-21.0 %",
    ("deepspeed:zero1", "bf16-mixed", "none"): "-10.1 %",
    ("fsdp+tp", "bf16-mixed", "none"): "-11.5 %",
    ("fsdp", "bf16-mixed", "op"): "-13.6 %",
    ("fsdp:shard=grad_op", "bf16-mixed", "op"): "-12.1 %",
    ("tp", "bf16-mixed", "op"): "-16.2 %",
    ("fsdp+tp", "bf16-mixed", "op"): "-18.6 %",
    ("deepspeed:zero1", "fp32", "every:2"): "+10.6 %",
    ("tp", "fp32", "every:2"): "-10.7 %",
    ("fsdp+tp", "fp32", "every:2"): "-10.4 %",
    ("tp", "fp32", "full"): "-13.3 %",
    ("fsdp+tp", "fp32", "full"): "-16.8 %",
    ("fsdp+tp", "fp32", "none"): "-12.7 %",
    ("fsdp+tp", "fp32", "op"): "-13.3 %",
}
OPEN = {key: f"open: advise's total {error} of the measured peak" for key, error in _ERRORS.items()}


def _open(case: dict) -> str | None:
    return OPEN.get((case["strategy"], case["precision"], case["checkpointing"]))


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
    assert {c[1] for c in cells} == {"fp32", "bf16-mixed"}
    assert {c[2] for c in cells} >= {"none", "full", "op", "every:2"}
    assert {c[0] for c in cells} >= {"ddp", "fsdp", "deepspeed:zero2", "deepspeed:zero3", "tp", "fsdp+tp", "pp"}


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
        slack = 64 if case["strategy"].startswith("deepspeed") else 0
        assert mem is not None and 0 <= case["state"] - mem.state <= slack, case


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
