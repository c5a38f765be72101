"""Step timing recorded from inside ``Session.step`` when a measuring launcher asks for it.

``paratrain compare`` sets ``PARATRAIN_METRICS=DIR``; each rank then appends one JSON line per optimizer step to
``DIR/rank<r>.jsonl`` (wall time of the step, since the first backward). Without the variable this is a no-op, so a
normal run pays nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO

METRICS_VAR = "PARATRAIN_METRICS"


class StepRecorder:
    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = path.open("a", buffering=1) if path else None
        self._t0: float | None = None
        self._last: float | None = None

    @classmethod
    def from_env(cls, rank: int) -> StepRecorder:
        folder = os.environ.get(METRICS_VAR)
        if not folder:
            return cls(None)
        Path(folder).mkdir(parents=True, exist_ok=True)
        return cls(Path(folder) / f"rank{rank}.jsonl")

    def backward_start(self) -> None:
        if self._file is not None and self._last is None:
            self._last = self._t0 = time.perf_counter()

    def step_end(self, step: int) -> None:
        if self._file is None or self._last is None:
            return
        now = time.perf_counter()
        rec = {"step": step, "t": time.time(), "dt": now - self._last, "since_first": now - self._t0}
        self._file.write(json.dumps(rec) + "\n")
        self._last = now

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
