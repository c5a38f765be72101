"""Where each rank is, for the launcher's watchdog: step number and what it is doing (its own code or a collective).

A distributed job hangs when one rank leaves the lock-step: it evaluates alone, sleeps, or skips a collective, and
the others wait for it inside theirs. torch can only say *that* a collective timed out, on the ranks that waited;
the rank to blame is the one that was *not* waiting. So every Session keeps a tiny in-memory record — step count,
phase, since when — that a daemon thread writes to ``rank<R>.beat.json`` in the launcher's notes folder at most
twice a second (the training loop itself only assigns three attributes). The launcher reads these notes to stop a
stalled job (``--stall-timeout``) and to name the culprit when a collective times out.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from paratrain.distenv import FAILURES_VAR

SCRIPT = "script"  # running the user's own code between paratrain calls (forward pass, evaluation, logging, ...)
INTERVAL_S = 0.5
SETTLED_S = 1.5  # a rank noted in the same collective for this long is waiting, not passing through


class Progress:
    """This rank's record; ``phase(...)`` marks a paratrain call that waits for the other ranks."""

    def __init__(self, folder: str | None, rank: int) -> None:
        self.step = 0
        self.phase_name = SCRIPT
        self.since = time.time()
        self._path = Path(folder) / f"rank{rank}.beat.json" if folder else None
        self._static = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
                        "attempt": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))}
        self._stop = threading.Event()
        if self._path is not None:
            threading.Thread(target=self._loop, name="paratrain-progress", daemon=True).start()

    @classmethod
    def from_env(cls, rank: int) -> Progress:
        return cls(os.environ.get(FAILURES_VAR), rank)

    def stepped(self, step: int) -> None:
        self.step = step
        self.phase_name, self.since = SCRIPT, time.time()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        previous = self.phase_name
        self.phase_name, self.since = name, time.time()
        yield  # an exception leaves the phase as it was: where this rank was when it failed
        self.phase_name, self.since = previous, time.time()

    def close(self, failed: bool = False) -> None:
        """Stop writing; a rank that failed keeps its last phase (where it was), others say "done"."""
        self._stop.set()
        if not failed:
            self.phase_name, self.since = "done", time.time()
        self.write()

    def write(self) -> None:
        if self._path is None:
            return
        data = {**self._static, "step": self.step, "phase": self.phase_name, "since": self.since,
                "written": time.time()}
        tmp = self._path.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps(data))
            os.replace(tmp, self._path)

    def _loop(self) -> None:
        while not self._stop.wait(INTERVAL_S):
            self.write()


def read_beats(folder: str | os.PathLike) -> dict[int, dict]:
    """Every rank's last record from the latest restart attempt, by rank."""
    beats: dict[int, dict] = {}
    for file in Path(folder).glob("rank*.beat.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError, KeyError):
            data = json.loads(file.read_text())
            beats[int(data["rank"])] = data
    if beats:
        last = max(b.get("attempt", 0) for b in beats.values())
        beats = {r: b for r, b in beats.items() if b.get("attempt", 0) == last}
    return beats


def _where(beat: dict, now: float) -> str:
    waited = now - beat["since"]
    if beat["phase"] == SCRIPT:
        return f"running its own code for {waited:.0f} s after step {beat['step']}"
    return f"waiting in {beat['phase']} for {waited:.0f} s (step {beat['step']})"


def stalled(beats: dict[int, dict], stall_s: float, now: float | None = None) -> bool:
    """Has some rank waited inside a collective for longer than ``stall_s``?"""
    now = time.time() if now is None else now
    return any(b["phase"] not in (SCRIPT, "done") and now - b["since"] > stall_s for b in beats.values())


def diagnose(beats: dict[int, dict], world_size: int, now: float | None = None) -> tuple[int | None, str]:
    """Which rank left the lock-step, and a sentence that says so (what it did, what the others wait in).

    The culprit is a rank that is not inside a collective while others are (it went its own way), else a rank
    that never reported, else one behind the others' step; when every rank waits in the same place, nobody is
    blamed and the sentence says where they wait.
    """
    now = time.time() if now is None else now
    # Only a rank seen waiting for a while counts: notes are written twice a second, so a failure that took
    # less than that may have overtaken them.
    waiting = {r: b for r, b in beats.items()
               if b["phase"] not in (SCRIPT, "done") and b.get("written", now) - b["since"] >= SETTLED_S}
    free = sorted(r for r, b in beats.items() if b["phase"] == SCRIPT)
    missing = sorted(set(range(world_size)) - set(beats))
    others = "; ".join(f"rank {r} is {_where(b, now)}" for r, b in sorted(waiting.items()))
    if free and waiting:
        culprit = free[0]
        b = beats[culprit]
        return culprit, (f"rank {culprit} (host {b['host']}) left the lock-step: it has been {_where(b, now)}, "
                         f"while {others}")
    if missing and waiting:
        culprit = missing[0]
        return culprit, f"rank {culprit} never reported progress (no Session, or it died early); {others}"
    steps = {b["step"] for b in waiting.values()}
    if len(steps) > 1:
        culprit = min(waiting, key=lambda r: waiting[r]["step"])
        b = beats[culprit]
        return culprit, f"rank {culprit} (host {b['host']}) is behind the others: it is {_where(b, now)}; {others}"
    phases = {b["phase"] for b in waiting.values()}
    if len(phases) > 1:  # same step, different collectives: the odd one out is the one that went its own way
        counts = {p: sum(b["phase"] == p for b in waiting.values()) for p in phases}
        odd = min(phases, key=lambda p: (counts[p], p))
        culprit = min(r for r, b in waiting.items() if b["phase"] == odd)
        return culprit, f"ranks disagree on the collective (mismatched calls): {others}"
    if waiting:
        return None, f"every rank waits in the same place: {others}"
    return None, "no rank reported progress"
