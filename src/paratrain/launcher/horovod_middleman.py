"""The process horovodrun puts between itself and each worker, made to finish stopping its worker before it exits.

horovodrun starts every worker through a "middleman" process: a shell runs the worker, and when the job is to stop
(a peer failed, Ctrl-C) a daemon thread of the middleman terminates the shell's children, then the shell. The
middleman's main thread meanwhile waits for the shell and exits as soon as it is gone, which can be while that
thread is still at work. The thread then fails in the exiting interpreter and half-prints "Exception in thread " to
the launcher's own stderr, over paratrain's last line. Here the middleman lets the thread finish first.

horovodrun spawns the middleman by reference to this function (the launcher swaps it in for Horovod's own), so it
runs in a fresh interpreter, where Horovod's module still holds its own middleman.
"""

from __future__ import annotations

import threading
from typing import Any


def middleman(command: Any, env: Any, exit_event: Any, *pipes: Any) -> None:
    from horovod.runner.common.util import safe_shell_exec

    horovods = safe_shell_exec._exec_middleman
    if horovods is middleman:
        raise RuntimeError("Horovod's middleman must run in the process horovodrun spawns for it")
    # Horovod's thread waits up to this long twice (for the children, then for the shell) before it kills
    stopping_s = 2 * safe_shell_exec.GRACEFUL_TERMINATION_TIME_S + 1
    started: list[threading.Thread] = []
    on_event = safe_shell_exec.on_event

    def recording(*args: Any, **kwargs: Any) -> threading.Thread:
        thread = on_event(*args, **kwargs)
        started.append(thread)
        return thread

    safe_shell_exec.on_event = recording
    try:
        horovods(command, env, exit_event, *pipes)  # ends with sys.exit(the worker's exit code)
    finally:
        if exit_event.is_set():  # the stopping thread has started (it never starts otherwise: no join then)
            for thread in started:
                thread.join(stopping_s)
