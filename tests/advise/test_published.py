"""advise against published GPU runs: per-GPU peak allocated and reserved memory of real training runs
(tests/advise/published_runs.py: each run's configuration and source). The allocator constant of
paratrain.advise.gpu_memory is fitted on published.FIT and validated on every other run; every run, fit or
validation, must land within 10 % of each figure it publishes. A run that needs something advise does not model yet
is a strict expected failure naming it, so the mark has to go when the model gains it.

``python -m tests.advise.published_runs`` prints the table docs/advise.md quotes; ``pytest -s`` prints it here.
"""

from __future__ import annotations

import pytest

from paratrain.advise import gpu_memory
from tests.advise import published_runs as published

TOLERANCE = 0.10


def test_the_runs_are_enough_and_the_fit_is_at_most_half():
    assert published.measurements() >= 8
    # at least six runs of methods advise models (the FSDP1 runs are kept, pending, beside them)
    assert sum(not published.pending(run) for run in published.RUNS) >= 6
    assert published.fit_measurements() * 2 <= published.measurements()
    assert set(published.FIT) <= {r.name for r in published.RUNS}
    for run in published.RUNS:
        assert run.source.startswith("https://"), run.name
        assert run.allocated_gib is not None or run.reserved_gib is not None, run.name


def test_the_allocator_constant_is_what_the_fit_runs_give():
    assert published.fitted_fragmentation_blocks() == pytest.approx(gpu_memory.FRAGMENTATION_BLOCKS, abs=0.05)


def test_the_allocator_constant_holds_on_the_validation_pairs():
    """Published allocated + fragmentation against published reserved, on runs the constant was not fitted on."""
    checked = published.allocator_check()
    print("\n" + "\n".join(f"{name}: {err * 100:+.1f} %" for name, err in checked))
    assert checked
    assert all(abs(err) <= TOLERANCE for _, err in checked), checked


def _params():
    out = []
    for run in published.RUNS:
        reasons = published.pending(run)
        marks = [pytest.mark.xfail(strict=True, reason="; ".join(reasons))] if reasons else []
        out.append(pytest.param(run, marks=marks, id=f"{run.name}-{'fit' if run.name in published.FIT else 'val'}"))
    return out


@pytest.mark.parametrize("run", _params())
def test_advise_lands_within_10_percent_of_the_published_run(run):
    prediction = published.predict(run)
    errors = prediction.errors()
    print(f"\n{run.name}: predicted {prediction.allocated_gib:.2f} / {prediction.reserved_gib:.2f} GiB, published "
          f"{run.allocated_gib} / {run.reserved_gib}, errors {errors}")
    assert errors
    assert all(abs(err) <= TOLERANCE for err in errors.values()), errors


def test_the_table_names_every_run():
    text = published.table()
    print("\n" + text)
    assert all(run.name in text and run.source in text for run in published.RUNS)
