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
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from paratrain import exiting
from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import job, worker
from paratrain.launcher import notes as notes_
from paratrain.launcher.job import Interrupted, Launch, LaunchPlan


def _child(script: str, args: list[str], threads: int | None) -> None:
    """The script's process: never returns into the launcher's code."""
    code = 1
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the script's, as under `python train.py` (the launcher raises)
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


def _wait(pid: int) -> tuple[int, int | None]:
    """Wait for the child; Ctrl-C reaches it too (same terminal process group), so keep waiting for it to leave.
    Returns its exit code and the signal the launcher was interrupted by, if any."""
    interrupted: int | None = None
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status), interrupted
        except (KeyboardInterrupt, exiting.Terminated) as exc:
            interrupted = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, interrupted)  # in case only the launcher got it (kill <launcher pid>)
        except ChildProcessError:
            return 0, interrupted


def run_script(script: str, args: list[str], threads: int | None, argv: list[str]) -> tuple[int, int | None]:
    """Run the script as one process; returns (exit code, negative for a signal; the signal that interrupted the
    launcher, if any)."""
    if not hasattr(os, "fork"):
        try:
            return subprocess.call(argv), None
        except KeyboardInterrupt:
            return 128 + signal.SIGINT, signal.SIGINT
    worker.flush_output()  # or the child would print the parent's buffered output a second time
    pid = os.fork()
    if pid == 0:
        _child(script, args, threads)
    return _wait(pid)


class Local:
    """single and dp: one process, whose command line is what the fork amounts to."""

    name = "local"
    starts_workers = False
    runs_torch = False  # the fork imports what the script imports

    def plan(self, launch: Launch) -> LaunchPlan:
        from paratrain.distenv import NPROC_VAR
        from paratrain.launcher.threads import choose_threads

        config = launch.config
        if (config.nproc or 1) > 1 or config.nnodes > 1:
            raise ConfigError(
                f"{launch.method} runs as one process, so --nproc {config.nproc} --nnodes {config.nnodes} "
                "cannot be honoured",
                hint=f"use --strategy ddp --nproc {config.nproc or 2} for several processes",
            )
        launch.env[NPROC_VAR] = "1"
        threads = choose_threads(1, requested=config.threads)
        launch.env["OMP_NUM_THREADS"] = str(threads.threads)
        # The same worker code as torchrun's processes (one-line errors, same exit codes), in a fork of this
        # process; this command is what it amounts to.
        argv = [sys.executable, "-m", "paratrain.launcher.worker", str(launch.script), *config.args]
        return LaunchPlan(config, launch.spec, self.name, 1, launch.env, argv, threads, launch.details,
                          launch.method_cls)

    def shell_line(self, plan: LaunchPlan) -> str:
        return f"{job.env_line(plan.env)} {shlex.join(plan.argv)}".strip()

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        # The launcher imported torch before choosing the count, so the script's process sets it — unless it is
        # the user's own OMP_NUM_THREADS, which torch already read at import exactly as under `python train.py`.
        threads = plan.threads.threads if plan.threads and not plan.threads.from_environment else None
        code, interrupted = run_script(plan.config.script, list(plan.config.args), threads, plan.argv)
        if interrupted or code == 128 + signal.SIGINT:
            raise Interrupted(interrupted or signal.SIGINT)
        if code != 0:
            refused = job.refused(notes)  # the script's paratrain error: its worker left the line to us
            if refused is not None and code > 0:
                raise refused
            what = f"exit code {notes_.exit_code(code)}"
            if code < 0:
                what += f", {notes_.signal_text(-code, notes_.finished(notes, 0))}"
            raise LaunchError(f"the {plan.spec} process failed ({what}); its output is above",
                              exit_code=notes_.exit_code(code))

    def ran_line(self, plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
        return job.processes_line(plan, done, spec, elapsed)

    def never_joined(self) -> str:
        return "ran as one process"


BACKEND = Local()
