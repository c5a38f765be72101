"""One-process methods (single, dp): the script runs in a fork of the launcher.

Starting a second interpreter cost ≈1.4 s here — mostly importing torch a second time. The launcher has already
imported torch (resolving the method needs it), so it forks: the child inherits the loaded interpreter and runs the
script through the same worker code as torchrun's processes, and the parent stays a supervisor that can still
report a crash by name (a segfault or abort kills the child, not the launcher), Ctrl-C and the exit code, as it
did with a separate process. Forking is safe here because the launcher has started no threads and touched no GPU.
Where ``os.fork`` does not exist, a fresh interpreter runs the script instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from paratrain.launcher import worker


def _child(script: str, args: list[str], threads: int | None) -> None:
    """The script's process: never returns into the launcher's code."""
    code = 1
    try:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)  # OpenMP read OMP_NUM_THREADS when torch was loaded, before the launch
        code = worker.run(script, args)
    except BaseException:  # a bug of ours: show it; the parent reports the exit code
        import traceback

        traceback.print_exc()
    finally:
        worker.flush_output()
        os._exit(code)


def _wait(pid: int) -> tuple[int, bool]:
    """Wait for the child; Ctrl-C reaches it too (same terminal process group), so keep waiting for it to leave."""
    interrupted = False
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), interrupted
        except KeyboardInterrupt:
            interrupted = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)  # in case only the launcher got it (kill -INT <launcher pid>)
        except ChildProcessError:
            return 0, interrupted


def run_script(script: str, args: list[str], threads: int | None, argv: list[str]) -> tuple[int, bool]:
    """Run the script as one process; returns (exit code, negative for a signal; whether Ctrl-C was pressed)."""
    if not hasattr(os, "fork"):
        try:
            return subprocess.call(argv), False
        except KeyboardInterrupt:
            return 128 + signal.SIGINT, True
    worker.flush_output()  # or the child would print the parent's buffered output a second time
    pid = os.fork()
    if pid == 0:
        _child(script, args, threads)
    return _wait(pid)
