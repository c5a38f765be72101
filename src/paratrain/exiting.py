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


_signalled = 0  # the last SIGINT/SIGTERM the command line's handlers raised for (0: none)


def _raise_interrupt(signum: int, _frame: object) -> None:
    global _signalled
    _signalled = signum
    raise KeyboardInterrupt


def _raise_terminated(signum: int, _frame: object) -> None:
    global _signalled
    _signalled = signum
    raise Terminated


def _note(signum: int, _frame: object) -> None:
    global _signalled
    _signalled = signum


def hold_signals() -> None:
    """Note SIGINT/SIGTERM without raising, until :func:`stop_on_signals`: the command line's imports run meanwhile
    (paratrain/cli/__init__.py), and an exception raised into them escapes before anything can catch it. Only in
    the main thread, where handlers can be set."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _note)
        signal.signal(signal.SIGTERM, _note)


def check_signals() -> None:
    """Raise again a signal whose exception was swallowed on its way up. A library's bare ``except:`` around an
    optional import caught the KeyboardInterrupt of a Ctrl-C pressed while `paratrain run` was importing, and the
    job started and ran to its end (1 Ctrl-C in 10 pressed 0.35 s in, on a busy machine): the launchers call this
    last thing before they start any process."""
    if _signalled == 2:
        raise KeyboardInterrupt
    if _signalled == Terminated.signum:
        raise Terminated


def stop_on_signals() -> None:
    """The command line's first act: from this moment SIGINT raises KeyboardInterrupt and SIGTERM raises
    :class:`Terminated`. Without it a SIGTERM before a launcher installs its own handlers killed the process
    with no word, and a SIGINT was ignored where the shell started paratrain with SIGINT ignored (a script's
    background job) until torchrun's agent installed its handler — the job ran on and exited 0."""
    import signal

    signal.signal(signal.SIGINT, _raise_interrupt)
    signal.signal(signal.SIGTERM, _raise_terminated)
