"""Launching through Horovod's own runner (``horovodrun --gloo``), called in-process like torchrun.

horovodrun starts one process per slot with ``HOROVOD_RANK``/``HOROVOD_SIZE``/... and its Gloo rendezvous server;
each process runs paratrain's worker (which maps those variables to the ``RANK``/``WORLD_SIZE`` contract the
Session reads) and the user's script. A worker that fails makes horovodrun stop the others; the launcher then names
the rank from the workers' own notes or, for a process killed from outside, from horovodrun's report.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from paratrain import exiting
from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import job
from paratrain.launcher.job import STALL_HINT, Interrupted, Launch, LaunchPlan

START_TIMEOUT_S = 60  # horovodrun's own default is 30 s; a loaded 2-core machine needs more to start N Pythons
_FAILED = re.compile(r"Process name:\s*(\d+)\s*\n\s*Exit code:\s*(-?\d+)")


def check(config: Any, gpus: int) -> int:
    """What horovodrun cannot do from paratrain's flags; returns the process count."""
    if config.nnodes > 1 or config.master:
        raise ConfigError("--strategy horovod runs on one machine in this version (--nnodes/--master are torchrun's "
                          "rendezvous, which horovodrun does not use)",
                          hint="on several machines run horovodrun -H host1:N,host2:N yourself with a paratrain "
                               "script, or use --strategy ddp --nnodes")
    if config.max_restarts:
        raise ConfigError("--max-restarts is torchrun's; horovod's elastic mode is not wired into paratrain",
                          hint="drop --max-restarts, or use --strategy ddp")
    return job.processes(config.nproc, gpus)


def argv(nproc: int, script: str, args: list[str], start_timeout: float | None) -> list[str]:
    """horovodrun's command line (after ``python -m horovod.runner.launch``)."""
    timeout = int(start_timeout or START_TIMEOUT_S)
    return ["-np", str(nproc), "-H", f"localhost:{nproc}", "--gloo", "--start-timeout", str(timeout),
            "--disable-cache", sys.executable, "-m", "paratrain.launcher.worker", script, *args]


def worker_env(timeout: float | None) -> dict[str, str]:
    """Horovod's own settings for a paratrain job: a rank that stops taking part ends the job (after ``--timeout``,
    default 5 minutes) instead of leaving the others waiting for ever."""
    stall = int(timeout) if timeout else 300
    return {"HOROVOD_STALL_CHECK_TIME_SECONDS": str(max(stall // 2, 1)),
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(stall),
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(stall),
            # Horovod's Keras binding wraps Keras 2 optimizers: a Keras script gets tf_keras (the user's value wins)
            "TF_USE_LEGACY_KERAS": os.environ.get("TF_USE_LEGACY_KERAS", "1")}


def _noting_signals(received: list[int]) -> Any:
    """horovodrun's handler for SIGINT/SIGTERM (it stops the workers), which also notes the signal: afterwards the
    job's end reads as an interruption, not as a worker that failed with SIGTERM."""
    from horovod.runner import gloo_run

    original = gloo_run.register_shutdown_event

    def register() -> Any:
        event = original()

        def on_signal(signum: int, _frame: object) -> None:
            received.append(signum)
            event.set()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        return event

    gloo_run.register_shutdown_event = register
    return original


@contextlib.contextmanager
def _closing_rendezvous() -> Any:
    """horovodrun leaves its rendezvous HTTP server listening after the job, on success and failure alike; its
    daemon thread then wakes during interpreter shutdown and half-prints "Exception in thread" over paratrain's last
    line. Every rendezvous server the job starts is shut and its port closed when the job ends."""
    from horovod.runner import gloo_run

    original, started = gloo_run.RendezvousServer, []

    class Closing(original):  # type: ignore[misc, valid-type]
        def start(self, *args: Any, **kwargs: Any) -> int:
            port = super().start(*args, **kwargs)
            started.append(self)
            return port

    gloo_run.RendezvousServer = Closing
    try:
        yield
    finally:
        gloo_run.RendezvousServer = original
        for server in started:
            server.stop()
            server._httpd.server_close()  # stop() joins the serving thread but leaves the socket open


@contextlib.contextmanager
def _recording_exits(exits: dict[int, int]) -> Any:
    """Every worker's exit code, as horovodrun's threads return them (it reports only the first, by a clock read
    after each thread's output is flushed: under load a peer that failed *because* a rank was killed can come first).
    """
    from horovod.runner.util import threads

    original = threads.execute_function_multithreaded

    def recording(fn: Any, args_list: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(fn, args_list, *args, **kwargs)
        if getattr(fn, "__module__", "") == "horovod.runner.gloo_run" and isinstance(result, dict):
            exits.update({int(rank): int(value[0]) for rank, value in result.items()
                          if isinstance(value, tuple) and value})
        return result

    threads.execute_function_multithreaded = recording
    try:
        yield
    finally:
        threads.execute_function_multithreaded = original


@contextlib.contextmanager
def _gloo_check_in_process() -> Any:
    """horovodrun asks "was Gloo built?" by importing each framework binding in a forked process, TensorFlow's
    first: with the Keras binding built, every launch (torch jobs too) imported TensorFlow once more — seconds, and
    TensorFlow's start-up lines on the launcher's stderr, past the devnull it sets for Python. The torch binding
    (which paratrain's setup always builds, with Gloo) answers the same question in-process, in a blink."""
    from horovod.runner import launch

    def gloo_built(verbose: bool = False) -> bool:
        import horovod.torch

        return bool(horovod.torch.gloo_built())

    original = launch.gloo_built
    launch.gloo_built = gloo_built
    try:
        yield
    finally:
        launch.gloo_built = original


@contextlib.contextmanager
def _patient_middlemen() -> Any:
    """Each worker's middleman process finishes stopping its worker before it exits, and starts with SIGINT held
    (see horovod_middleman)."""
    from horovod.runner.common.util import safe_shell_exec

    from paratrain.launcher import horovod_middleman

    original, execute = safe_shell_exec._exec_middleman, safe_shell_exec.execute
    safe_shell_exec._exec_middleman = horovod_middleman.middleman
    safe_shell_exec.execute = horovod_middleman.spawning_with_sigint_held(execute)
    try:
        yield
    finally:
        safe_shell_exec._exec_middleman, safe_shell_exec.execute = original, execute


def _quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (if it is not running yet) with its own warnings ignored.

    horovodrun's in-process runner leaves a multiprocessing semaphore behind now and then; the tracker frees it when
    the launcher exits, but first warns about it ("There appear to be 1 leaked semaphore objects…") from its own
    process — after the job's last line, so the last thing the user saw was a warning about Horovod's internals.
    The tracker takes its warning filters from this interpreter's ``-W`` options when it starts; the user's own
    warnings and the workers' are untouched."""
    from multiprocessing import resource_tracker

    saved = list(sys.warnoptions)
    sys.warnoptions.append("ignore::UserWarning:multiprocessing.resource_tracker")
    try:
        resource_tracker.ensure_running()
    finally:
        sys.warnoptions[:] = saved


def run(plan: LaunchPlan, notes: Path) -> None:
    from horovod.runner import gloo_run, launch

    from paratrain.launcher.watchdog import Watchdog

    saved_argv = sys.argv
    restore_signals = job.keep_signals()
    watchdog = Watchdog(notes, plan.world_size, plan.config.stall_timeout)
    received: list[int] = []
    exits: dict[int, int] = {}
    original = _noting_signals(received)
    try:
        sys.argv = ["horovodrun", *plan.argv]
        args = launch.parse_args()  # horovodrun's parser reads sys.argv
        args.command = job.holding_sigint(args.command)  # SIGINT held while a worker's interpreter starts
        _quiet_resource_tracker()
        with watchdog, _closing_rendezvous(), _gloo_check_in_process(), _recording_exits(exits), _patient_middlemen():
            exiting.check_signals()  # after this function's imports
            launch._run(args)
        # Workers stopped by horovodrun on a signal can all report success (they leave quietly on its SIGTERM)
        if watchdog.verdict:
            raise LaunchError(watchdog.verdict, hint=STALL_HINT)
        if received:
            raise Interrupted(received[0])
    except RuntimeError as exc:
        if watchdog.verdict:
            raise LaunchError(watchdog.verdict, hint=STALL_HINT) from None
        if received:
            raise Interrupted(received[0]) from None
        raise _failure(str(exc), notes, exits) from None
    finally:
        gloo_run.register_shutdown_event = original
        sys.argv = saved_argv
        restore_signals()


def _failure(text: str, notes: Path, exits: dict[int, int] | None = None) -> LaunchError:
    """Named from the workers' own notes (sub-second times) — unless they only echo a rank that died without a
    word — else from the exit codes horovodrun's threads returned."""
    from paratrain.launcher import notes as notes_

    match = _FAILED.search(text)
    code = int(match.group(2)) if match else 1
    if code == 128 + signal.SIGINT:  # Ctrl-C reached every worker: they stopped quietly
        return Interrupted(signal.SIGINT)
    failed = {rank: own for rank, own in (exits or {}).items() if own != 0}
    if match:  # the first process to exit by horovodrun's clock, first in line
        failed = {int(match.group(1)): code, **failed}
    silent = notes_.silent_failure(notes, list(failed))
    noted = notes_.first_failure(notes)
    refused = job.refused(notes)
    if refused is not None and silent is None:
        return refused
    if noted is not None and silent is None:
        own = int(noted.get("code", 1))
        return LaunchError(f"rank {noted['rank']} failed first (exit code {own}): {noted['error']}", exit_code=own)
    if failed:
        rank = silent if silent is not None else next(iter(failed))
        what = f"exit code {failed[rank]}"
        if failed[rank] > 128:
            what += f", {notes_.signal_text(failed[rank] - 128, notes_.finished(notes, rank))}"
        return LaunchError(f"rank {rank} failed first ({what}); horovodrun stopped the others", exit_code=failed[rank])
    said = text.strip().splitlines()[0] if text.strip() else "horovodrun failed"
    return LaunchError(f"the horovod job could not start: {said}",
                       hint="--start-timeout is --rendezvous-timeout here; `paratrain doctor` checks the install")


class Horovodrun(job.ModuleLauncher):
    name = "horovodrun"
    module = "horovod.runner.launch"
    joined_what = "Horovod (no paratrain.Session, no hvd.init())"

    def plan(self, launch: Launch) -> LaunchPlan:
        from paratrain.distenv import NPROC_VAR
        from paratrain.launcher.config import script_framework
        from paratrain.launcher.tf_import import quiet_env
        from paratrain.launcher.threads import choose_threads

        config, env = launch.config, launch.env
        gpus = job.gpu_count()
        nproc = check(config, gpus)
        threads = choose_threads(nproc, gpus=gpus, requested=config.threads)
        env.update({NPROC_VAR: str(nproc), "OMP_NUM_THREADS": str(threads.threads),
                    "TF_NUM_INTRAOP_THREADS": str(threads.threads),  # a Keras script's share, as under tfconfig
                    **worker_env(config.timeout)})
        if script_framework(launch.script) == "tensorflow":  # Horovod's Keras binding: as quiet as under tfconfig
            quiet_env(env, config.verbose)
        args = argv(nproc, str(launch.script), list(config.args), config.rendezvous_timeout)
        return LaunchPlan(config, launch.spec, self.name, nproc, env, args, threads, launch.details,
                          launch.method_cls)

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        run(plan, notes)


BACKEND = Horovodrun()
