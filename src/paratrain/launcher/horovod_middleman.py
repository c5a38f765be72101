"""The process horovodrun puts between itself and each worker, made to finish stopping its worker before it exits.

horovodrun starts every worker through a "middleman" process: a shell runs the worker, and when the job is to stop
(a peer failed, Ctrl-C) a daemon thread of the middleman terminates the shell's children, then the shell. The
middleman's main thread meanwhile waits for the shell and exits as soon as it is gone, which can be while that
thread is still at work. The thread then fails in the exiting interpreter and half-prints "Exception in thread " to
the launcher's own stderr, over paratrain's last line. Here the middleman lets the thread finish first.

That thread also fails on its own when the shell ends while it works: it looks the shell's children up twice, and
the second look raises NoSuchProcess once the shell is gone, printing a thread's traceback under paratrain's line
(1 Ctrl-C in 5 here, 5 in 10 on a busy machine). Here a shell that ended meanwhile is taken as stopped, and the
children found at the first look are waited for and killed as Horovod would have.

And a Ctrl-C that reached a middleman while it was starting — a spawned interpreter that imports the launcher's
own modules before Horovod's code puts it in a session of its own — printed an import's KeyboardInterrupt traceback
(2 Ctrl-C in 16 here, pressed 1.3-1.4 s into a job on a busy machine). The launcher starts each middleman with
SIGINT held (:func:`spawning_with_sigint_held`), and the middleman drops a held one: the launcher got the same
Ctrl-C and stops the job through Horovod's own event.

horovodrun spawns the middleman by reference to this function (the launcher swaps it in for Horovod's own), so it
runs in a fresh interpreter, where Horovod's module still holds its own middleman.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any


def middleman(command: Any, env: Any, exit_event: Any, *pipes: Any) -> None:
    from horovod.runner.common.util import safe_shell_exec

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C held since the start is the launcher's to act on
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
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
    safe_shell_exec.terminate_executor_shell_and_children = _tolerant(
        safe_shell_exec.terminate_executor_shell_and_children, safe_shell_exec.GRACEFUL_TERMINATION_TIME_S)
    try:
        horovods(command, env, exit_event, *pipes)  # ends with sys.exit(the worker's exit code)
    finally:
        if exit_event.is_set():  # the stopping thread has started (it never starts otherwise: no join then)
            for thread in started:
                thread.join(stopping_s)


def _tolerant(terminate: Any, grace_s: float) -> Any:
    """Horovod's ``terminate_executor_shell_and_children``, finishing quietly when the shell ends while it works."""
    import psutil

    def stop(pid: int) -> None:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        try:
            terminate(pid)
        except psutil.NoSuchProcess:  # the shell ended between two of its looks: its children may not have
            for child in children:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.terminate()
            _, alive = psutil.wait_procs(children, timeout=grace_s)
            for child in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()

    return stop


def spawning_with_sigint_held(execute: Any) -> Any:
    """Horovod's ``safe_shell_exec.execute``, spawning the middleman with SIGINT blocked in the calling thread (a
    spawned process inherits its mask). Only off the main thread, where Horovod calls it for every worker: the
    launcher's own SIGINT is then delivered to its main thread as ever."""

    def execute_held(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            return execute(*args, **kwargs)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            return execute(*args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    return execute_held
