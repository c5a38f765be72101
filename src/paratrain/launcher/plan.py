"""Turn a RunConfig into a launch and run it: what is the same for every launcher.

Here: resolve the method (a misspelt one is reported before torch loads), check the script, collect what the
workers read (``PARATRAIN_*``: the method, its options, the training options, checkpoints), let the method check
what it cannot run, and hand that to the method's launcher (:mod:`paratrain.launcher.job`: local, torchrun,
horovodrun, tfconfig), which adds how its processes start. After the job, the last line says what ran, as the
workers reported it — or that N independent copies ran because the script never joined the job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from paratrain import exiting
from paratrain import options as train_options
from paratrain.console import notice
from paratrain.distenv import (
    CHECKPOINT_DIR_VAR,
    CHECKPOINT_EVERY_VAR,
    FAILURES_VAR,
    KEEP_VAR,
    STRATEGY_VAR,
    TIMEOUT_VAR,
    method_options_env,
)
from paratrain.errors import ConfigError
from paratrain.launcher import job
from paratrain.launcher import notes as notes_
from paratrain.launcher.config import RunConfig, script_path
from paratrain.launcher.job import STALL_HINT, Interrupted, Launch, LaunchPlan
from paratrain.launcher.threads import oversubscribed
from paratrain.launcher.torch_import import load_torch
from paratrain.strategies import registry
from paratrain.strategies.base import StrategyOptions, format_spec, parse_spec

__all__ = ["STALL_HINT", "Interrupted", "LaunchPlan", "build_plan", "execute", "method_env"]


def _check_compiles(script: Path) -> None:
    """A script that is not Python fails here, once, before any process starts (not once per rank)."""
    try:
        source = script.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read script {script}: {exc.strerror}") from None
    try:
        compile(source, str(script), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        lineno = getattr(exc, "lineno", None)  # a SyntaxError's; a ValueError (null bytes) has none
        where = f" (line {lineno})" if lineno else ""
        raise ConfigError(f"{script} is not a valid Python script{where}: {getattr(exc, 'msg', exc)}",
                          hint="paratrain run starts Python training scripts; check the path and the file") from None


def method_env(cls: type, options: StrategyOptions, train: dict, timeout: float | None) -> dict[str, str]:
    """What a worker's Session reads to know its method, the method's options, the training options and the
    collective timeout — the same for `paratrain run` and `paratrain.launch`."""
    env = {STRATEGY_VAR: str(cls.method)}  # type: ignore[attr-defined]
    env.update(method_options_env(options.to_strings()))
    env.update(train_options.to_env(train))
    if timeout:
        env[TIMEOUT_VAR] = f"{timeout:g}"
    return env


def build_plan(config: RunConfig) -> LaunchPlan:
    entry = registry.info(parse_spec(config.strategy)[0])  # a misspelt method is reported without waiting for torch
    if entry.framework == "torch":
        load_torch()  # the method's module imports torch: here, the launcher's one fast import
    cls, options = registry.resolve(config.strategy)
    registry.require_available(cls)
    if not config.script:
        raise ConfigError("no script given", hint="paratrain run --strategy ddp --nproc 2 train.py")
    if config.script.startswith("-"):
        raise ConfigError(f"no such option: {config.script}", hint="see `paratrain run --help`")
    script = script_path(config.script, hint="give the path of your training script")
    _check_compiles(script)
    env = method_env(cls, options, config.train_options(), config.timeout)
    env.update(cls.script_env(options, script))
    # Checked here, before any process starts (a bad DeepSpeed config is one line now, not N tracebacks later).
    details = cls.check_launch(options, train_options.TrainOptions(**train_options.given(config.train_options())),
                               script)
    if config.checkpoint_dir:
        env[CHECKPOINT_DIR_VAR] = str(Path(config.checkpoint_dir).resolve())
        env[CHECKPOINT_EVERY_VAR] = str(config.checkpoint_every)
        if config.keep:
            env[KEEP_VAR] = str(config.keep)
    launch = Launch(config, cls, options, format_spec(cls.method, options), script, env, details)
    return job.backend(entry.launcher).plan(launch)


def execute(plan: LaunchPlan) -> int:
    """Run the plan; returns 0, or raises LaunchError carrying the failing rank's exit code."""
    choice = plan.threads
    if choice is not None and oversubscribed(plan.nproc, choice.threads, choice.cores):
        notice(f"{plan.nproc} process(es) × {choice.threads} thread(s) ({choice.reason}) on {choice.cores} core(s): "
               "oversubscribed — they take turns on the cores, and step times will show it")
    with _environment(plan.env):  # the workers inherit it; this process (a notebook's, say) gets its own back
        return _execute(plan)


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _execute(plan: LaunchPlan) -> int:
    backend = plan.backend
    # A folder removed in `finally`, not a TemporaryDirectory: its clean-up is a finalizer that also runs at exit,
    # and the one-process methods' fork runs the inherited exit handlers — it removed the folder, and the notes
    # in it, before this process could read them.
    notes = Path(tempfile.mkdtemp(prefix="paratrain-notes-"))
    try:
        os.environ[FAILURES_VAR] = str(notes)
        try:
            exiting.check_signals()
            backend.run(plan, notes)
        finally:
            os.environ.pop(FAILURES_VAR, None)
        # N trainings that each saw all the data and wrote the same files, which "ddp × 2 processes finished"
        # would misreport as one parallel job.
        copies = backend.starts_workers and plan.world_size > 1 and notes_.never_joined(notes, plan.nproc)
        done = notes_.by_rank(notes, "done")
        ran = plan.method_cls.ran_as(plan.config.strategy, notes) if plan.method_cls and not copies else None
    finally:
        shutil.rmtree(notes, ignore_errors=True)
    elapsed = time.time() - _process_start()
    if copies:
        notice(f"{plan.world_size} independent copies of {Path(plan.config.script).name} ran ({elapsed:.1f} s), not "
               f"one {plan.spec} job: the script never {backend.never_joined()} — see Port your script in the README")
        return 0  # the script did what it was written to do; the line says it was not a parallel job
    if ran is not None and ran.note:
        notice(ran.note)
    line = backend.ran_line(plan, done, ran.spec if ran else plan.spec, elapsed)
    notice(f"{line}; {ran.aside}" if ran is not None and ran.aside else line)
    return 0


def _process_start() -> float:
    """When this launcher started (the wall time a user sees includes start-up, not just the training)."""
    import psutil

    return psutil.Process().create_time()
