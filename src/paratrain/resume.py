"""Periodic checkpoints and automatic resume, so a killed worker costs minutes of work, not the run.

``paratrain run --max-restarts K --checkpoint-dir DIR --checkpoint-every N`` (or ``Session(checkpoint_dir=...,
checkpoint_every=...)``): every N optimizer steps the Session saves ``DIR/step-<count>``; when torchrun restarts the
group after a death, ``prepare()`` finds the newest *complete* one and restores it, so the documented loop
``while session.step_count < N`` continues exactly. A checkpoint is complete once it has been renamed into place
(``checkpoint.save`` writes into ``.step-<count>.tmp`` first), so a save cut short is never taken as the latest.
Only the newest ``keep`` are kept. Every rank must see DIR (one machine, or a shared filesystem across nodes).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from paratrain.checkpoint import META
from paratrain.errors import ConfigError

_NAME = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class AutoCheckpoint:
    folder: Path
    every: int
    keep: int = 2

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ConfigError(f"checkpoint_every={self.every} must be 1 or more")
        if self.keep < 1:
            raise ConfigError(f"keep={self.keep} must be 1 or more")
        if self.folder.exists() and not self.folder.is_dir():
            raise ConfigError(f"checkpoint directory {self.folder} is a file",
                              hint="give --checkpoint-dir a directory (it is created if missing)")

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def path_for(self, step: int) -> Path:
        return self.folder / f"step-{step:08d}"

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first."""
        if not self.folder.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.folder.iterdir()
                 if (m := _NAME.match(p.name)) and (p / META).is_file()]
        return [p for _step, p in sorted(found)]

    def latest(self) -> Path | None:
        done = self.complete()
        return done[-1] if done else None

    def prune(self) -> None:
        """Keep the newest ``keep`` complete checkpoints; drop older ones and leftovers of interrupted saves."""
        done = self.complete()
        for old in done[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        newest = int(_NAME.match(done[-1].name).group(1)) if done else -1  # type: ignore[union-attr]
        for tmp in self.folder.glob(".step-*.tmp"):
            m = re.match(r"^\.step-(\d+)\.tmp$", tmp.name)
            if m and int(m.group(1)) <= newest:
                shutil.rmtree(tmp, ignore_errors=True)
