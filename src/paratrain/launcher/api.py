"""``paratrain.launch(fn, *args, strategy=..., nproc=..., **options)``: a training function on N processes, from
Python or a notebook, through torch's elastic agent (the machinery ``paratrain run`` uses via torchrun).

Each process gets a :class:`~paratrain.Session` built for the method with the given training options and runs
``fn(session, *args)``; rank 0's return value comes back. Processes are *spawned* (a fresh interpreter each: forking
a process that already runs torch's thread pools, or a Jupyter kernel, is what makes other notebook launchers hang),
so ``fn`` must be importable by name — checked before anything starts, with the fix in the error.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from paratrain import exiting
from paratrain import options as train_options
from paratrain.distenv import FAILURES_VAR, NPROC_VAR
from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import notes as notes_
from paratrain.launcher import plan, worker

NOTEBOOK_FIX = ("put the function in a .py file next to the notebook (a cell can write one with %%writefile "
                "train_fn.py) and import it from there: `from train_fn import train`")


class RankError(LaunchError):
    """A rank raised: the message names the rank and the exception; ``remote_traceback`` is that rank's stack."""

    def __init__(self, rank: int, error: str, remote_traceback: str) -> None:
        text = f"rank {rank} failed: {error}"
        if remote_traceback:
            text += f"\n\nTraceback on rank {rank}:\n{remote_traceback.rstrip()}"
        super().__init__(text, exit_code=1)
        self.rank = rank
        self.error = error
        self.remote_traceback = remote_traceback


def _check_importable(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Spawned processes find ``fn`` by module and name; say so now, with the fix, if they cannot."""
    if not callable(fn):
        raise ConfigError(f"paratrain.launch needs a function to run, got {type(fn).__name__}")
    name = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", None)
    if "<lambda>" in name or "<locals>" in name:
        raise ConfigError(f"{name} is a lambda or is defined inside another function, so the worker processes "
                          "cannot import it", hint="define it at the top level of a module and import it")
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        raise ConfigError(f"{name} is defined in a notebook or an interactive session, which the spawned worker "
                          "processes cannot import", hint=NOTEBOOK_FIX)
    try:
        pickle.dumps((fn, args))
    except Exception as exc:  # any pickling failure: the message says what could not be sent
        raise ConfigError(f"cannot send {name} and its arguments to the worker processes ({exc})",
                          hint="pass plain data (numbers, strings, tensors, paths) and top-level functions") from None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker_env(strategy: str, nproc: int, train: dict[str, Any], timeout: float | None) -> dict[str, str]:
    from paratrain.strategies import registry
    from paratrain.strategies.base import format_spec

    cls, opts = registry.resolve(strategy)
    registry.require_available(cls)
    if registry.info(cls.method).framework != "torch":
        raise ConfigError(f"{cls.method} is a TensorFlow method; paratrain.launch starts PyTorch functions",
                          hint=f"put the Keras training in a script and run `paratrain run -s {cls.method} script.py`")
    entry = registry.info(cls.method)
    if not entry.multi_process and nproc != 1:
        raise ConfigError(f"{cls.method} runs as one process, so nproc={nproc} cannot be honoured",
                          hint=f'use strategy="ddp", nproc={nproc} for several processes')
    if not {"local", "torchrun"} & set(entry.launchers):  # what torch's elastic_launch can stand in for
        raise ConfigError(f"{format_spec(cls.method, opts)} cannot be started by paratrain.launch in this version")
    return {**plan.method_env(cls, opts, train, timeout), NPROC_VAR: str(nproc)}


def _rank_main(fn: Callable[..., Any], args: tuple[Any, ...], env: dict[str, str], threads: int) -> Any:
    """One process: the environment ``paratrain run`` would give it, a Session, the user's function. A failure is
    also noted with its time, so the caller can name the rank that failed first — not a peer that then lost its
    connection to it."""
    os.environ.update(env)
    import torch

    torch.set_num_threads(threads)
    from paratrain.session import Session

    session = None
    try:
        session = Session()
        return fn(session, *args)
    except BaseException as exc:
        exiting.mark_failing()  # close() must not wait in a barrier for ranks that wait for this one
        # The same timed failure note `paratrain run`'s workers leave, read back the same way (notes_.first_failure).
        worker.note("failure", {"error": f"{type(exc).__name__}: {exc}",
                                "traceback": "".join(traceback.format_exception(exc))})
        raise
    finally:
        if session is not None:
            session.close()


def _failure(exc: Exception) -> RankError:
    """The first failing rank of a ChildFailedError, with the traceback torchelastic recorded for it."""
    failures = getattr(exc, "failures", {}) or {}
    if not failures:
        return RankError(0, str(exc), "")
    rank, failure = min(failures.items(), key=lambda item: (item[1].timestamp, item[0]))
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    message = data.get("message", {})
    if isinstance(message, dict):
        error = str(message.get("message") or failure.message)
        trace = str((message.get("extraInfo") or {}).get("py_callstack") or "")
    else:
        error, trace = str(failure.message), ""
    if not error or error == "None":
        error = f"exit code {failure.exitcode}"
    return RankError(rank, error, trace)


def launch(fn: Callable[..., Any], *args: Any, strategy: str = "ddp", nproc: int = 2, timeout: float | None = None,
           **options: Any) -> Any:
    """Run ``fn(session, *args)`` on ``nproc`` processes under ``strategy`` and return rank 0's return value.

    ``options`` are training options (precision, grad_clip, compile, seed, grad_accum, per_rank_batch), meaning
    what they mean for ``paratrain run``. An exception on any rank is raised here as :class:`RankError`, with that
    rank's traceback.
    """
    from paratrain.launcher.threads import choose_threads

    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError(f"nproc={nproc!r} must be 1 or more")
    _check_importable(fn, args)
    train = train_options.given(options)
    env = _worker_env(strategy, nproc, train, timeout)

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=f"paratrain-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{_free_port()}", max_restarts=0,
                          monitor_interval=0.1, start_method="spawn")
    threads = choose_threads(nproc).threads
    # The agent logs every failure with its whole stack, and the termination of the other ranks; ours is enough.
    loggers = [logging.getLogger(name) for name in ("torch.distributed.elastic", "torch.multiprocessing")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.CRITICAL)
    try:
        with tempfile.TemporaryDirectory(prefix="paratrain-launch-") as notes:
            try:
                results = elastic_launch(config, _rank_main)(fn, args, {**env, FAILURES_VAR: notes}, threads)
            except ChildFailedError as exc:
                noted = notes_.first_failure(Path(notes))
                if noted is not None:
                    raise RankError(noted["rank"], noted["error"], noted.get("traceback", "")) from None
                raise _failure(exc) from None
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)
    return results[0]
