"""Reference runs shared by the per-method equivalence tests: hand-written single-process training."""

from __future__ import annotations

import pytest

from tests.helpers.launch import EXAMPLES, check, python

STEPS = 200


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """``reference(optimizer, **args)`` -> folder with losses.json/weights.pt of examples/handwritten/single.py."""
    cache: dict[tuple, str] = {}

    def get(optimizer: str, steps: int = STEPS, samples: int = 512, batch_size: int = 32) -> str:
        key = (optimizer, steps, samples, batch_size)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"ref-{optimizer}")
            check(python(str(EXAMPLES / "handwritten" / "single.py"), "--optimizer", optimizer,
                         "--steps", str(steps), "--samples", str(samples), "--batch-size", str(batch_size),
                         "--out", str(out)))
            cache[key] = str(out)
        return cache[key]

    return get
