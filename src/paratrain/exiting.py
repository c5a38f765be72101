"""Whether this process is leaving because of an error: one flag, in a module that imports nothing.

The worker sets it on its failure path and in its signal handlers; the process-group code and the Session read it
(an error exit must not wait in a barrier for ranks that wait for this one). It lives here rather than next to the
process group because setting it must never import anything: horovodrun's SIGTERM can arrive while the failure
path is importing torch, and a handler that imported the same half-initialised module printed paratrain's own
traceback ("partially initialized module … circular import") instead of leaving quietly.
"""

from __future__ import annotations

_failing = False


def mark_failing() -> None:
    """This process is exiting because of an error: leave without waiting for the other ranks."""
    global _failing
    _failing = True


def is_failing() -> bool:
    return _failing


class Terminated(BaseException):
    """SIGTERM (a scheduler's, a ``kill``) as an exception, as Python makes SIGINT a KeyboardInterrupt: the code
    it interrupts unwinds — stopping what it started — and the command line says so in one line and exits 143.
    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it."""

    signum = 15


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated


def stop_on_signals() -> None:
    """The command line's first act: from this moment SIGINT raises KeyboardInterrupt and SIGTERM raises
    :class:`Terminated`. Without it a SIGTERM before a launcher installs its own handlers killed the process
    with no word, and a SIGINT was ignored where the shell started paratrain with SIGINT ignored (a script's
    background job) until torchrun's agent installed its handler — the job ran on and exited 0."""
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_terminated)
