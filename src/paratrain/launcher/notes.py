"""Reading the workers' own notes (``PARATRAIN_FAILURES``: failure, done, waiting, joined) and wording what they say.

Every launcher (torchrun's, horovodrun's, TensorFlow's, the one-process fork) names a failed job's cause the same
way: the earliest failure a worker noted itself, with sub-second times, rather than the echo of it that a peer
reports a moment later; and a signal by its name, saying whether the script had already finished.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path


def read(notes: Path, kind: str) -> list[dict]:
    """The workers' notes of one kind from the last restart attempt."""
    found = []
    for file in notes.glob(f"rank*.{kind}.json"):
        try:
            found.append(json.loads(file.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    last = max((d.get("attempt", 0) for d in found), default=attempt)
    return [d for d in found if d.get("attempt", 0) == last]


def by_rank(notes: Path, kind: str) -> dict[int, dict]:
    return {int(d["rank"]): d for d in read(notes, kind)}


def first_failure(notes: Path) -> dict | None:
    """The earliest failure the workers noted themselves in the last restart, if any."""
    found = read(notes, "failure")
    return min(found, key=lambda d: d["time"]) if found else None


def finished(notes: Path, rank: int) -> bool:
    """Had this rank's script already returned normally (so a signal hit it on its way out)?"""
    return any(d.get("rank") == rank for d in read(notes, "done"))


def signal_text(signum: int, finished: bool) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return f"killed by {name}" + (" after its script had finished" if finished else "")


def exit_code(code: int) -> int:
    """A process's exit code as a shell reports it (killed by signal N -> 128+N)."""
    return 128 - code if code < 0 else code
