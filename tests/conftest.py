"""Suite-wide guards.

- A test that leaks launcher environment variables or leaves a live process group fails (each would silently
  change the next test's behaviour).
- No test reads or writes the user's ~/.paratrain (a temporary PARATRAIN_HOME for the whole session).
- Under CI=true, a test skipped because a backend that `make test` installs is missing becomes a failure: a
  broken install must never look like a green run.
- The files that take longest start first (see ``pytest_collection_modifyitems``).
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.launch import EXAMPLES, check, python
from tests.helpers.requirements import MISSING_PREFIX, installed_by_make_test

WATCHED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


def _snapshot() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in WATCHED or k.startswith("PARATRAIN_")}


@pytest.fixture(scope="session", autouse=True)
def _private_home(tmp_path_factory):
    """Every test, and every process it starts, keeps its compare history in a temporary home: the suite must never
    write pytest's runs into the user's own ~/.paratrain/history.db, nor let advise read the user's history."""
    old = os.environ.get("PARATRAIN_HOME")
    os.environ["PARATRAIN_HOME"] = str(tmp_path_factory.mktemp("paratrain-home"))
    yield
    if old is None:
        os.environ.pop("PARATRAIN_HOME", None)
    else:
        os.environ["PARATRAIN_HOME"] = old


@pytest.fixture(autouse=True)
def _no_leaks():
    before = _snapshot()
    yield
    after = _snapshot()
    leaked = {k: v for k, v in after.items() if before.get(k) != v}
    for k in leaked:
        os.environ.pop(k, None)
    for k, v in before.items():
        os.environ[k] = v
    assert not leaked, f"test leaked environment variables: {sorted(leaked)}"
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
        pytest.fail("test left a live process group")


def pytest_collection_modifyitems(config, items):
    """Files in the order of their cost, the longest first: files marked ``first`` (one run of minutes), then by
    how many of their tests start processes. `make test` hands whole files to two pytest-xdist workers in this
    order (``--dist loadfile --no-loadscope-reorder``); xdist's own order, by test count, started the demo's
    compare (one test, minutes) last, and one worker idled while the other ran it."""
    def file(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    first: set[str] = {file(item) for item in items if item.get_closest_marker("first")}
    processes: dict[str, int] = {}
    for item in items:
        processes[file(item)] = processes.get(file(item), 0) + bool(item.get_closest_marker("multiprocess"))
    items.sort(key=lambda item: (file(item) not in first, -processes[file(item)]))  # stable: a file stays whole


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped:
        return
    reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if MISSING_PREFIX in reason:
        module = reason.split(MISSING_PREFIX, 1)[1].split()[0]
        if installed_by_make_test(module):
            report.outcome = "failed"
            report.longrepr = f"CI=true and `make test` installs {module}, but it is missing: {reason}"


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
