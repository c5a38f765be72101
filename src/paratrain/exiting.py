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
