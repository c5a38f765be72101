"""What the launcher starts in every process: the user's script, with torchelastic's error recording.

A failing rank's exception goes to torchrun's per-rank error file (what torchelastic's ``@record`` does; done here
only when there is an exception, because importing torchelastic's error module costs every worker ≈0.1 s of
start-up that ``python train.py`` does not pay). torchrun's timestamps there are whole seconds, so when rank 1
raises and rank 0 then fails on the closed connection in the same second, it cannot tell which came first; each
rank therefore also notes its own failure time (``PARATRAIN_FAILURES``) and the launcher reports the earliest one —
the root cause, not its echo.

Leaving is the other half of this module's job. torch's gloo backend can abort a process *during interpreter
finalization* ("terminate called without an active exception": C++ threads of the transport still hold work when
static objects are destroyed), after the script's work is done — a few runs in ten under load, whether or not the
script destroyed its process group. So once the script has returned (or failed), the worker does what the
interpreter would do on its way out — join the script's non-daemon threads, run the ``atexit`` handlers (the
Session's ``close`` among them), leave a process group the script left up through a monitored barrier, flush
output — and then ends the process with ``os._exit``, skipping finalization. A crash *during* the script is
untouched: it kills the process before any of this runs, and the launcher reports it.

Nothing the script made is destroyed after it: its namespace (or, when it failed, its exception, whose traceback
holds the namespace) is kept, and the collector is stopped, until ``os._exit``. Under ``python train.py`` a
module-level model lives until finalization; destroying it earlier, while this thread holds the GIL, runs a DDP
Reducer's and a gloo process group's destructors, which join gloo's threads — and a gloo thread still releasing a
finished collective's tensors waits for that GIL: the finished job hung (torch's pybind11 bindings of these
classes do not drop the GIL in their destructors).

The failure path and the signal handlers import nothing: what they need is imported with this module. A SIGTERM
(horovodrun's, when a peer fails) that arrived while the failure path was importing torch ran a handler importing
the same half-initialised module, and every rank printed paratrain's own traceback instead of leaving quietly.
A finished rank's note says whether it ever joined its job, read from modules the script loaded (nothing is
imported for it either), so the launcher can tell a ported script from independent copies of an unported one; under
a TensorFlow method it also says which strategy the script ran under and its replicas (:mod:`.tf_setup`), so the
launcher's last line reports what ran, not what was asked for.
"""

from __future__ import annotations

import os
import signal

# A Ctrl-C (torchrun forwards it to the ranks) that lands while this rank is still starting — before run() takes
# over SIGINT — ends it at once and quietly, as nothing has begun: Python's own handler would print an import's
# KeyboardInterrupt traceback from every rank under the launcher's one line. The launchers start this module with
# SIGINT blocked (job.holding_sigint), so one that came while the interpreter itself was starting is held until
# this handler is in place, and is delivered now.
if __name__ == "__main__":
    signal.signal(signal.SIGINT, lambda signum, _frame: os._exit(128 + signum))
    if hasattr(signal, "pthread_sigmask"):  # not on Windows, where nothing blocked it either
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

import atexit
import contextlib
import faulthandler
import gc
import json
import runpy
import sys
import threading
import time
import traceback
from types import TracebackType
from typing import NoReturn

from paratrain import distenv, exiting
from paratrain.distenv import (
    DEEPSPEED_WATCH_VAR,
    FAILURES_VAR,
    LOCAL_RANK_ARG_VAR,
    QUIET_TF_VAR,
    STRATEGY_VAR,
    TIMEOUT_VAR,
)
from paratrain.errors import ParatrainError
from paratrain.launcher import built, tf_import, tf_setup, torch_import
from paratrain.launcher import notes as notes_


def _peak_memory() -> dict | None:
    """This rank's peak memory (paratrain.metrics), for the job's last line; only if the Session's module is
    already loaded — the done note imports nothing new."""
    metrics = sys.modules.get("paratrain.metrics")
    return metrics.peak_memory() if metrics is not None else None


def _tensorflow_method(name: str | None) -> bool:
    """Is ``name`` a method whose scripts are Keras ones (the registry says; no TensorFlow, no torch imported)?"""
    if not name:
        return False
    from paratrain.errors import ParatrainError
    from paratrain.strategies import registry

    try:
        return registry.info(name).framework == "tensorflow"
    except ParatrainError:
        return False


def _adopt_horovod_env() -> None:
    """Under horovodrun the rank comes as HOROVOD_RANK/...: give the script (and paratrain's notes) the same
    RANK/WORLD_SIZE/LOCAL_RANK contract as under torchrun."""
    if "HOROVOD_RANK" not in os.environ or "RANK" in os.environ:
        return
    # horovodrun stops the workers of a failed or interrupted job with SIGTERM, through the shell it started them
    # with, which then prints "Terminated" for each: leave quietly instead (the launcher says what happened).
    signal.signal(signal.SIGTERM, _leave_on_sigterm)
    for ours, theirs in (("RANK", "HOROVOD_RANK"), ("WORLD_SIZE", "HOROVOD_SIZE"),
                         ("LOCAL_RANK", "HOROVOD_LOCAL_RANK"), ("LOCAL_WORLD_SIZE", "HOROVOD_LOCAL_SIZE")):
        if theirs in os.environ:
            os.environ[ours] = os.environ[theirs]


def _leave_on_sigterm(signum: int, _frame: object) -> None:
    """Leave at once. This runs between any two bytecodes of the main thread — in the middle of an import, of the
    failure path — so it imports nothing and nothing it does can raise past ``os._exit``."""
    try:
        exiting.mark_failing()
        flush_output()
    finally:
        os._exit(128 + signum)


def _run_script(script: str, args: list[str]) -> None:
    faulthandler.enable(all_threads=True)  # as torchelastic's @record: a crash in native code shows the Python stack
    if os.environ.get(LOCAL_RANK_ARG_VAR) == "1":
        args = [*args, f"--local_rank={os.environ.get('LOCAL_RANK', '0')}"]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    # the script's own `import torch`, when it comes, without the collector's rescans; then what it builds is watched
    torch_import.install(after=built.watch_torch)
    if os.environ.get(DEEPSPEED_WATCH_VAR) == "1":
        from paratrain.launcher import deepspeed_watch

        deepspeed_watch.install(lambda facts: note("deepspeed", facts))  # what the script's own config ran
    if _tensorflow_method(os.environ.get(STRATEGY_VAR)) or os.environ.get(QUIET_TF_VAR) == "1":  # (horovod: Keras)
        # and its `import tensorflow` set up for the method (tf_setup), without TF's start-up lines when quiet
        tf_import.install(quiet=os.environ.get(QUIET_TF_VAR) == "1")
    try:
        _KEPT.append(runpy.run_path(script, run_name="__main__"))
    except BaseException as exc:
        _KEPT.append(exc)
        raise
    finally:
        _keep_everything()


_KEPT: list[object] = []  # the script's namespace, or its exception: alive until os._exit (module docstring)


def _keep_everything() -> None:
    """From here to ``os._exit`` nothing the script made is collected: no destructor of torch's runs in the
    wind-down (see the module docstring)."""
    gc.disable()
    gc.freeze()


def note(name: str, data: dict) -> bool:
    """Write a small JSON note for the launcher into the failures folder (if this launch has one); was it written?"""
    folder = os.environ.get(FAILURES_VAR)
    if not folder:
        return False
    rank = os.environ.get("RANK", "0")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # --max-restarts: only the last one counts
    path = os.path.join(folder, f"rank{rank}.{name}.json")
    try:
        with open(path, "w") as fh:
            json.dump({"rank": int(rank), "attempt": attempt, "time": time.time(), **data}, fh)
    except OSError:  # the launcher uses torchrun's error files instead
        return False
    return True


def _record_for_torchrun(exc: BaseException) -> None:
    """Write the exception to torchrun's error file for this rank, as torchelastic's ``@record`` would."""
    if "TORCHELASTIC_ERROR_FILE" not in os.environ:
        return
    from torch.distributed.elastic.multiprocessing.errors import get_error_handler

    with contextlib.suppress(Exception):  # our own note is what the launcher reads first
        get_error_handler().record_exception(exc)


def _note_failure(summary: str, code: int = 1, user_error: bool = False) -> bool:
    """Note the failure for the launcher; was it noted? ``user_error``: a ParatrainError, which the launcher says
    once for all ranks (notes.refusal)."""
    exiting.mark_failing()  # the Session's exit must not wait in a barrier for ranks that wait for us
    return note("failure", {"error": summary, "code": code, **({"user_error": True} if user_error else {})})


def _exit_code_of(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message"): what the interpreter would print
    return 1


def _join_threads() -> None:
    """The interpreter waits for non-daemon threads before it exits; so do we."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()


def _leave_process_group() -> None:
    """A script that left its process group up (most native scripts) leaves it the way Session does."""
    if "torch.distributed" not in sys.modules:  # never loaded: no group to leave, and no torch import to pay
        return
    from paratrain.strategies import _procgroup

    timeout = os.environ.get(TIMEOUT_VAR)
    with contextlib.suppress(Exception):  # a peer already gone: the launcher reports that, not us
        _procgroup.leave(float(timeout) if timeout else None)


def _joined_its_job() -> bool:
    """Did this process ever join its job: a torch process group (a Session's, or the script's own
    init_process_group) or Horovod (``hvd.init``)? Read from the modules the script loaded, never importing one.

    Checked when the script has returned, but a script may have destroyed its group (or shut Horovod down) by then,
    so ``is_initialized()`` is not enough alone: torch keeps the backend and the init method of its last default
    group (private, but neither reset on destroy since torch 1.x), Horovod the ranks of its global process set.
    """
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    with contextlib.suppress(Exception):
        if c10d is not None and (c10d.is_initialized() or getattr(c10d, "_backend", None)
                                 or getattr(c10d, "_default_pg_init_method", None)):
            return True
    for name in ("horovod.torch.mpi_ops", "horovod.tensorflow.mpi_ops"):
        with contextlib.suppress(Exception):
            if name in sys.modules and sys.modules[name].is_initialized():
                return True
    sets = sys.modules.get("horovod.common.process_sets")
    return bool(getattr(getattr(sets, "global_process_set", None), "ranks", None))


def _wind_down(code: int) -> int:
    """Leave as the interpreter would, minus finalization (where gloo can abort a process whose work is done).

    The script's work is over: a Ctrl-C from here on is noted, not raised into the exit handlers, where it cut one
    short and printed "Exception ignored in atexit callback" under the launcher's line (1 Ctrl-C in 4 pressed as a
    short job ended, on a busy machine). The rank is then failing (no barrier waits for peers that left); a second
    Ctrl-C here ends it at once, for an exit handler that does not return (a one-process run's launcher sends no
    SIGKILL)."""
    global _winding_down
    _winding_down = 0
    signal.signal(signal.SIGINT, _note_interrupt)
    if code == 0:  # with the strategy a TensorFlow script ran under, when it imported TensorFlow (tf_setup)
        strategy = tf_setup.report()
        note("done", {**strategy, "joined": _joined_its_job() or bool(strategy.get("multi_worker")),
                      "peak_mem": _peak_memory(), "built": built.names(), "backend": built.backend()})
    with contextlib.suppress(Exception):
        _join_threads()
    atexit._run_exitfuncs()  # the script's handlers and the Session's close(), in the usual order
    _leave_process_group()
    flush_output()
    return code


def flush_output() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


_interrupted = False


def _on_sigint(signum: int, frame: object) -> None:
    global _interrupted
    if _interrupted:  # a second Ctrl-C, or the launcher forwarding the first: already stopping
        return
    _interrupted = True
    raise KeyboardInterrupt


_winding_down = 0  # Ctrl-Cs received while winding down


def _note_interrupt(signum: int, frame: object) -> None:
    global _interrupted, _winding_down
    _winding_down += 1
    if _winding_down > 1:
        flush_output()
        os._exit(128 + signum)
    _interrupted = True
    exiting.mark_failing()


def _stop_quietly() -> int:
    """Ctrl-C (forwarded by the launcher): the launcher says so in one line; no traceback from every rank."""
    exiting.mark_failing()
    flush_output()
    return 128 + signal.SIGINT


ECHO_GRACE_S = 1.0


def _await_interrupt() -> None:
    """A collective that failed because a peer is gone may be the echo of a Ctrl-C that reached the peer first: this
    rank was blocked inside the collective, so its own SIGINT had not run yet. Wait a moment for it (its handler
    raises KeyboardInterrupt, which stops the rank quietly) before reporting a failure."""
    time.sleep(ECHO_GRACE_S)  # a signal handler's exception ends the sleep early


def _script_traceback(exc: BaseException, script: str) -> TracebackType | None:
    """The exception's traceback from the script's own first frame on, as ``python train.py`` shows it: the
    worker's and runpy's frames above it are paratrain's plumbing, not the user's code (``PARATRAIN_DEBUG=1``
    keeps them). A traceback that never passes through the script is kept whole."""
    tb = exc.__traceback__
    if distenv.debug():
        return tb
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == script:  # runpy compiles the script under the path it was given
            return tb
        tb = tb.tb_next
    return exc.__traceback__


def run(script: str, args: list[str]) -> int:
    """Run SCRIPT in this process as a worker; returns its exit code once everything the script started is wound
    down. The caller must then leave with ``os._exit`` (see the module docstring): one-process methods call this
    from the launcher's own process, so the script does not pay a second interpreter and torch import.

    A ParatrainError (a user mistake, e.g. a bad option, or a method refusing the model) is one line, not a
    traceback: the launcher's, once for all ranks, when the note for it was written (every rank raises it alike);
    else, under a launcher that reads no notes, this rank's own.
    """
    global _interrupted
    _interrupted = False
    _adopt_horovod_env()
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        return _run_and_report(script, args)
    except KeyboardInterrupt:  # Ctrl-C, also one that arrives while a failure is being reported or wound down
        return _stop_quietly()


def _run_and_report(script: str, args: list[str]) -> int:
    """The script, then its failure (noted, one line or its traceback) or its success, then the wind-down."""
    try:
        _run_script(script, args)
    except ParatrainError as exc:
        noted = _note_failure(exc.one_line(), exc.exit_code, user_error=True)
        _record_for_torchrun(exc)
        if distenv.debug():
            traceback.print_exc()
        if not noted:  # no paratrain launcher reads the note (plain torchrun): the line is this rank's to say
            rank = os.environ.get("RANK", "0")
            print(f"paratrain: error (rank {rank}): {exc.one_line()}", file=sys.stderr, flush=True)
        return _wind_down(exc.exit_code)
    except SystemExit as exc:
        code = _exit_code_of(exc)
        if code != 0:
            _note_failure(f"exited with {code}", code)
        return _wind_down(code)
    except Exception as exc:
        if _interrupted:  # an echo of the interrupt (a peer that stopped first): not a failure of its own
            return _stop_quietly()
        if notes_.is_echo(str(exc)):
            _await_interrupt()  # raises KeyboardInterrupt if this loss of a peer was a Ctrl-C reaching it first
        _note_failure(notes_.exception_line(exc))
        exc.with_traceback(_script_traceback(exc, script))  # the hooks print the exception's own traceback
        _record_for_torchrun(exc)
        sys.excepthook(type(exc), exc, exc.__traceback__)  # the traceback, through any hook the script set
        return _wind_down(1)
    return _wind_down(0)


def main() -> NoReturn:
    if len(sys.argv) < 2:
        print("usage: python -m paratrain.launcher.worker SCRIPT [ARGS...]", file=sys.stderr)
        os._exit(2)
    os._exit(run(sys.argv[1], sys.argv[2:]))


if __name__ == "__main__":
    main()
