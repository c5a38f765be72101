"""One measured run: launch a script through `paratrain run` under one method, collect what it recorded.

Each run is a separate process group in its own session, so a crash, a hang past the time limit or Ctrl-C stops
exactly the processes it started (by their process-group id) and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paratrain.bench.collect import read_rank_files, summarize
from paratrain.bench.load import LoadMeter
from paratrain.distenv import METRICS_VAR, PROFILE_VAR
from paratrain.launcher.threads import choose_threads, oversubscribed
from paratrain.run_hooks import RunHooks


@dataclass(frozen=True)
class CellSpec:
    strategy: str
    nproc: int
    script: str
    args: list[str] = field(default_factory=list)
    run_flags: list[str] = field(default_factory=list)  # training options for `paratrain run`, e.g. --precision
    max_steps: int | None = None  # compare --steps for a user's script: its Session stops there
    env: dict[str, str] = field(default_factory=dict)  # extra worker environment (compare's seed floor)


def _last_error(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()] if log.exists() else []
    for line in reversed(lines):
        if line.startswith("paratrain: error"):
            return line.split(":", 2)[-1].strip()
    return lines[-1][-300:] if lines else "no output"


def _nothing_recorded(script: str) -> str:
    """Why a run that succeeded measured nothing, in the terms of its script's framework: a Session script records
    through session.step(), a Keras one (under any method, Horovod's too) through the callbacks paratrain.tf hands to
    model.fit."""
    from paratrain.launcher.config import script_framework

    if script_framework(script) == "tensorflow":
        return ("the script's model.fit recorded no steps: pass callbacks=ptf.callbacks(GLOBAL_BATCH) to it so "
                "compare can measure it")
    return "the script never called session.step(): nothing to measure"


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C back until the block is done, then raise it. Popen forks and waits for the exec: interrupted
    there, the run has started in its own session (out of reach of the terminal's Ctrl-C) and the caller never
    learns its pid to stop it. Only the main thread receives signals; elsewhere the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def _stop(proc: subprocess.Popen) -> None:
    """Terminate the run's whole process group (torchrun and its workers), then make sure: the group, not only
    `paratrain run`, must be gone — a worker still saving its notes outlives its launcher by a moment, longer on a
    loaded machine."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait)
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)  # anyone left in the group?
            except ProcessLookupError:
                return
            time.sleep(0.05)


def run_cell(spec: CellSpec, folder: Path, *, warmup: int, timeout: float, tokens_per_sample: int | None = None,
             progress: Callable[[int], None] | None = None, profile_steps: int = 0) -> dict[str, Any]:
    """Run one cell to completion (or failure) and return its measurements."""
    # Absolute before anything else: the cell runs in its own working directory, and every path it is handed
    # (where to write metrics, above all) must still point here.
    folder = folder.resolve()
    shutil.rmtree(folder, ignore_errors=True)  # a re-used --out must not mix in an older run's records
    folder.mkdir(parents=True)
    metrics_dir = folder / "metrics"
    log = folder / "log.txt"
    env = dict(os.environ, **spec.env, **{METRICS_VAR: str(metrics_dir)})
    if profile_steps:  # the steps right after warm-up run under the profiler, for the time breakdown
        env[PROFILE_VAR] = f"{max(warmup, 1)},{profile_steps}"
    env.update(RunHooks(max_steps=spec.max_steps).to_env())
    # Its own working directory: files the script writes (checkpoints, logs) cannot leak into the next cell.
    work = folder / "work"
    work.mkdir()
    # Every cell gets the same machine: its processes together use all the cores (an OMP_NUM_THREADS the user
    # set for other work would otherwise give one process a fraction of what several processes get).
    share = choose_threads(spec.nproc, environ={})
    cmd = [sys.executable, "-m", "paratrain.cli.main", "run", "--strategy", spec.strategy, "--nproc", str(spec.nproc),
           "--threads", str(share.threads), "--timeout", str(int(max(60, timeout))), *spec.run_flags, spec.script,
           *spec.args]
    steps_so_far = _StepCounter(metrics_dir / "rank0.jsonl")
    launch = time.time()
    load = LoadMeter()  # other work beside the cell: read once every process of the cell is reaped
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = None
        try:
            with _interrupt_deferred():  # a Ctrl-C inside Popen would leave a started run behind, unknown to us
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=env, cwd=work, start_new_session=True)
            while proc.poll() is None:
                if time.perf_counter() - start > timeout:
                    _stop(proc)
                    break
                if progress is not None:
                    progress(steps_so_far())
                time.sleep(0.25)
        except BaseException:  # Ctrl-C: stop what we started, keep what finished
            if proc is not None:
                _stop(proc)
            raise
    wall = time.perf_counter() - start
    cell: dict[str, Any] = {"wall_s": wall, "log": str(log), "other_load": load.other_cores()}
    cell.update(summarize(metrics_dir, warmup=warmup, launch_time=launch, tokens_per_sample=tokens_per_sample))
    used = cell.get("threads_per_process") or share.threads
    cell["oversubscribed"] = oversubscribed(spec.nproc, used, share.cores)
    if proc.returncode == 0 and cell["steps_done"] > 0:
        cell.update(status="ok", error=None)
    elif proc.returncode is None or wall > timeout:
        cell.update(status="failed", error=f"timed out after {timeout:g} s")
    elif proc.returncode == 0:
        cell.update(status="failed", error=_nothing_recorded(spec.script))
    else:
        cell.update(status="failed", error=_last_error(log))
    return cell


class _StepCounter:
    """Steps rank 0 has recorded so far, reading only what was appended since the last look: the record grows with
    every step, and re-reading all of it four times a second would cost more the longer a cell runs."""

    def __init__(self, file: Path) -> None:
        self.file, self.offset, self.steps = file, 0, 0

    def __call__(self) -> int:
        try:
            with self.file.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:  # not written yet
            return self.steps
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written is counted on the next look
        self.offset += len(complete)
        self.steps += sum(1 for line in complete.splitlines() if line.startswith(b'{"step"'))
        return self.steps


__all__ = ["CellSpec", "read_rank_files", "run_cell"]
