"""Reading the workers' own notes (``PARATRAIN_FAILURES``: failure, done, waiting, joined) and wording what they say.

Every launcher (torchrun's, horovodrun's, TensorFlow's, the one-process fork) names a failed job's cause the same
way: the earliest failure a worker noted itself, with sub-second times, rather than the echo of it that a peer
reports a moment later, in the one line of its message that names the cause; and a signal by its name, saying
whether the script had already finished. A finished rank's note also says whether it ever joined its job, so a
script that was never ported is not reported as a job of the method it was launched under.

The workers import this module up front (it imports nothing heavy): their failure path must not import anything.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

CAUSE_CHARS = 300  # the error line names the cause; the whole message is in the rank's traceback above it
# What a rank says when a peer is gone (its connection broke, Horovod shut down, gloo aborted): the echo of a
# failure elsewhere, never its cause.
ECHOES = ("connection closed", "connection reset", "sigabrt", "horovod has been shut down")


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
    """The earliest failure the workers noted themselves in the last restart, if any: the earliest that names a
    cause of its own, else the earliest echo of a lost peer."""
    found = read(notes, "failure")
    causes = [d for d in found if not is_echo(str(d.get("error", "")))]
    return min(causes or found, key=lambda d: d["time"]) if found else None


def refusal(notes: Path) -> dict | None:
    """The first failure when it is a paratrain error (a ``ParatrainError`` the worker noted as ``user_error``: tp
    or pp refusing a model, a bad option) and no rank noted another cause of its own, else None.

    Such an error is raised alike by every rank that reaches it (the ranks the launcher stopped first never got to
    say it), and its message already says what to change: the launcher says it once, as the message alone — the
    rank it happened to hear first is noise. The workers leave the saying to the launcher (see worker.py).
    """
    causes = [d for d in read(notes, "failure") if not is_echo(str(d.get("error", "")))]
    if not causes:
        return None
    first = min(causes, key=lambda d: d["time"])
    if not first.get("user_error") or any(d.get("error") != first.get("error") for d in causes):
        return None
    return first


def silent_failure(notes: Path, failed: list[int]) -> int | None:
    """The first of the ``failed`` ranks (in the launcher's order) that left no word: no failure note and no
    "done" — a rank killed from outside. It is the cause when the ranks that did note anything only echo its loss
    (their note reached the launcher first, or the launcher's clock listed them first)."""
    noted = first_failure(notes)
    if noted is not None and not is_echo(str(noted.get("error", ""))):
        return None
    said = by_rank(notes, "failure")
    return next((rank for rank in failed if rank not in said and not finished(notes, rank)), None)


def finished(notes: Path, rank: int) -> bool:
    """Had this rank's script already returned normally (so a signal hit it on its way out)?"""
    return any(d.get("rank") == rank for d in read(notes, "done"))


def never_joined(notes: Path, nproc: int) -> bool:
    """Did every rank on this node finish without ever joining its job (no process group, no ``hvd.init``)?

    A rank cannot join a process group its peers stay out of, so when none of this node's ranks joined, the launch
    ran independent copies of the script. A note without the ``joined`` field (or a missing note) counts as joined:
    the launcher only says so when every rank said it.
    """
    done = by_rank(notes, "done")
    return len(done) == nproc and all(d.get("joined") is False for d in done.values())


def cause_line(text: str) -> str:
    """The line of a (possibly multi-line) error message that names its cause: the first non-empty one, trimmed.

    Messages put the cause first and the advice or a stack after it — Horovod's "Extension horovod.tensorflow has
    not been built: …" then "If this is not expected, reinstall Horovod with HOROVOD_WITH_TENSORFLOW=1 …", torch's
    "Connection closed by peer" then "Exception raised from … frame #0 …" — so the last line is the wrong one. A
    first line that ends in ":" only introduces the next one, which is added.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line if len(line) <= CAUSE_CHARS else line[:CAUSE_CHARS - 1].rstrip() + "…"


def is_echo(text: str) -> bool:
    """Does this error only say that a peer is gone?"""
    lowered = text.lower()
    return any(echo in lowered for echo in ECHOES)


def exception_line(exc: BaseException) -> str:
    """An exception as one line for the job's last line: its type and the line of its message naming the cause."""
    line = cause_line(str(exc))
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def signal_text(signum: int, finished: bool) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    return f"killed by {name}" + (" after its script had finished" if finished else "")


def exit_code(code: int) -> int:
    """A process's exit code as a shell reports it (killed by signal N -> 128+N)."""
    return 128 - code if code < 0 else code
