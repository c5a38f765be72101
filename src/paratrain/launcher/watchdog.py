"""The launcher-side watchdog: a job whose ranks stopped moving is stopped, with the rank to blame named.

It reads the ranks' progress notes (``paratrain.progress``) while torchrun runs the job. When some rank has waited
inside a collective for ``--stall-timeout`` seconds, it records a verdict and sends SIGTERM to the launcher itself:
torchrun's own signal handling then stops every worker, and the launcher reports the verdict instead of an
interruption. Only ranks of this node are seen (each node's launcher watches its own).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from paratrain import progress

POLL_S = 0.5


class Watchdog:
    def __init__(self, notes: Path, world_size: int, stall_s: float | None) -> None:
        self.notes, self.world_size, self.stall_s = notes, world_size, stall_s
        self.verdict: str | None = None
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watchdog:
        if self.stall_s:
            self._thread = threading.Thread(target=self._watch, name="paratrain-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        assert self.stall_s is not None
        while not self._done.wait(POLL_S):
            beats = progress.read_beats(self.notes)
            if beats and progress.stalled(beats, self.stall_s):
                _culprit, text = progress.diagnose(beats, self.world_size)
                self.verdict = f"no progress for {self.stall_s:g} s (--stall-timeout): {text}"
                os.kill(os.getpid(), signal.SIGTERM)  # torchrun stops the workers on its own signal path
                return


def explain_timeout(notes: Path, world_size: int) -> str | None:
    """After a collective timed out: who left the lock-step, from the ranks' last progress notes."""
    beats = progress.read_beats(notes)
    if not beats:
        return None
    culprit, text = progress.diagnose(beats, world_size)
    return text if culprit is not None else None
