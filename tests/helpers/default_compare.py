"""The README's first command, run once for the whole suite: `make demo`'s compare line (every default method at
1 and 2 processes, a relative ``--out``), from a folder that is not the repository.

It is the longest single run in the suite (18 cells). tests/cli/test_demo.py runs it once (a module fixture: the
file's tests share one pytest-xdist worker) and checks there both what a new user sees and the default cells' own
promises (DeepSpeed's stages, Horovod's unseen communication, the Keras cells), which each used to start a compare
of their own.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers.launch import ROOT, paratrain

STEPS = 40  # the demo's own 120 steps measure nothing more here; 40 leave 35 timed steps after the warm-up


def demo_command() -> list[str]:
    """The compare line of the Makefile's demo target, as written there (without the venv's path)."""
    text = (ROOT / "Makefile").read_text()
    target = re.search(r"^demo:.*?\n((?:\t.*\n)+)", text, re.M)
    assert target, "the Makefile has no demo target"
    line = next(ln for ln in target.group(1).splitlines() if "paratrain compare" in ln)
    words = shlex.split(line.strip())
    return words[words.index("compare"):]


@dataclass
class DefaultCompare:
    proc: subprocess.CompletedProcess
    cwd: Path  # where it was started (not the repository)
    out: str  # --out as the Makefile writes it

    @property
    def folder(self) -> Path:
        return self.cwd / self.out

    @property
    def results(self) -> dict[str, Any]:
        return json.loads((self.folder / "results.json").read_text())

    @property
    def cells(self) -> dict[str, dict[str, Any]]:
        return {c["key"]: c for c in self.results["cells"]}

    @property
    def report(self) -> str:
        return (self.folder / "report.md").read_text()


def run(base: Path) -> DefaultCompare:
    command = demo_command()
    out = command[command.index("--out") + 1]
    user = base / "somewhere" / "else"
    user.mkdir(parents=True)
    proc = paratrain(*command, "--steps", str(STEPS), cwd=user, timeout=1100)
    return DefaultCompare(proc, user, out)
