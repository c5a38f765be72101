"""Start real paratrain / torchrun processes from tests and read back what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SESSION_TRAIN = EXAMPLES / "session_train.py"


def worker_env(**extra: str) -> dict[str, str]:
    # The suite's private history home travels; every other PARATRAIN_* setting is the test's to give.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARATRAIN_") or k == "PARATRAIN_HOME"}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def paratrain(*args: str, timeout: float = 240, cwd: str | os.PathLike | None = None,
              env: dict[str, str] | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter, as a user would (``input``: what is typed on its standard input)."""
    return subprocess.run([sys.executable, "-m", "paratrain.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=env or worker_env(), input=input)


def python(*args: str, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env or worker_env())


def check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    return proc


def results(folder: str | os.PathLike) -> tuple[list[float], dict[str, torch.Tensor]]:
    folder = Path(folder)
    losses = json.loads((folder / "losses.json").read_text())["losses"]
    return losses, torch.load(folder / "weights.pt", weights_only=True)


def max_diffs(a: str | os.PathLike, b: str | os.PathLike, offset: int = 0) -> tuple[float, float]:
    """(max abs loss difference, max abs weight difference); ``offset`` skips the head of ``a``'s curve."""
    la, wa = results(a)
    lb, wb = results(b)
    la = la[offset:]
    assert len(la) == len(lb), f"curves differ in length: {len(la)} vs {len(lb)}"
    assert wa.keys() == wb.keys()
    loss = max(abs(x - y) for x, y in zip(la, lb, strict=True))
    weight = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    return loss, weight
