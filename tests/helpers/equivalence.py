"""The equivalence check every torch method must pass (DESIGN.md §2): same loss curve, same final weights."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.launch import SESSION_TRAIN, check, max_diffs, paratrain

TOL = 1e-5


def train(strategy: str, nproc: int, out: Path, optimizer: str = "sgd", steps: int = 200,
          *extra: str, env: dict[str, str] | None = None) -> Path:
    check(paratrain("run", "--strategy", strategy, "--nproc", str(nproc), str(SESSION_TRAIN),
                    "--optimizer", optimizer, "--steps", str(steps), "--out", str(out), *extra, env=env))
    return out


def assert_equivalent(reference: str | Path, run: str | Path, offset: int = 0, check_loss: bool = True) -> None:
    loss, weight = max_diffs(reference, run, offset)
    if check_loss:
        assert loss <= TOL, f"loss curve differs by {loss:.3g} (> {TOL})"
    assert weight <= TOL, f"final weights differ by {weight:.3g} (> {TOL})"
