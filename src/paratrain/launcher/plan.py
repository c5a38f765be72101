"""Turn a RunConfig into a concrete launch (torchrun arguments or one local process) and run it.

torch methods go through ``torch.distributed.run`` called in-process (rendezvous, restarts, per-rank error files are
torchrun's); single and dp run the script in a fork of the launcher (one torch import: as fast to start as
``python train.py``; see :mod:`paratrain.launcher.local`). The worker sees the method only through ``PARATRAIN_*``
variables, so the user's script never changes.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paratrain import options as train_options
from paratrain.console import notice
from paratrain.distenv import (
    CHECKPOINT_DIR_VAR,
    CHECKPOINT_EVERY_VAR,
    FAILURES_VAR,
    KEEP_VAR,
    NPROC_VAR,
    STRATEGY_VAR,
    TF_CONFIG_VAR,
    TIMEOUT_VAR,
    method_options_env,
)
from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import notes as notes_
from paratrain.launcher.config import RunConfig, script_framework, script_path
from paratrain.launcher.threads import ThreadChoice, choose_threads, oversubscribed
from paratrain.launcher.torch_import import load_torch
from paratrain.launcher.watchdog import Watchdog, explain_timeout
from paratrain.strategies import registry
from paratrain.strategies.base import Launcher, StrategyOptions, format_spec, parse_spec

STALL_HINT = ("every rank must make the same collective calls in the same order (evaluate on all ranks, or let "
              "the others wait in session.barrier()); raise --timeout / --stall-timeout if a rank is just slow")
SHUTDOWN_GRACE_S = 3  # seconds workers get to exit on a signal before they are killed


class Interrupted(LaunchError):
    """The launcher itself got a signal (Ctrl-C, a scheduler's SIGTERM); the workers are gone."""

    def __init__(self, signum: int) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}; every process of the job was stopped", exit_code=128 + signum)


@dataclass(frozen=True)
class LaunchPlan:
    config: RunConfig
    spec: str  # normalised method spec, e.g. "fsdp:shard=grad_op"
    launcher: Launcher
    nproc: int
    env: dict[str, str] = field(default_factory=dict)  # added to the workers' environment
    argv: list[str] = field(default_factory=list)  # torchrun arguments, or the local command
    threads: ThreadChoice | None = None  # CPU threads per process, and why
    details: dict[str, Any] | None = None  # what the method derived from the options (DeepSpeed: its config)
    method_cls: Any = None  # the Strategy class: asked after the job what really ran (Strategy.ran_as)

    @property
    def world_size(self) -> int:
        return self.nproc * self.config.nnodes

    def command_line(self) -> str:
        """What this launch is, as a shell command a user could run themselves."""
        shown = dict(self.env)
        note = ""
        if self.launcher is Launcher.TFCONFIG and TF_CONFIG_VAR in shown:  # show worker 0's TF_CONFIG
            workers = json.loads(shown.pop(TF_CONFIG_VAR))
            shown["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
            note = f"  # worker 0 of {len(workers)}; worker i gets task index i"
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()))
        if self.launcher is Launcher.TORCHRUN:
            cmd = [sys.executable, "-m", "torch.distributed.run", *self.argv]
        elif self.launcher is Launcher.HOROVODRUN:
            cmd = [sys.executable, "-m", "horovod.runner.launch", *self.argv]
        else:
            cmd = self.argv
        return f"{env} {shlex.join(cmd)}{note}".strip()


def _gpu_count() -> int:
    torch = load_torch()
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _torchrun_knows(flag: str) -> bool:
    """Whether the installed torchrun takes ``flag``: paratrain runs on the torch the user has, and an unknown flag
    would fail every launch with torchrun's own usage error."""
    from torch.distributed.run import get_args_parser

    return any(flag in action.option_strings for action in get_args_parser()._actions)


def _check_compiles(script: Path) -> None:
    """A script that is not Python fails here, once, before any process starts (not once per rank)."""
    try:
        source = script.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read script {script}: {exc.strerror}") from None
    try:
        compile(source, str(script), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        where = f" (line {exc.lineno})" if getattr(exc, "lineno", None) else ""
        raise ConfigError(f"{script} is not a valid Python script{where}: {getattr(exc, 'msg', exc)}",
                          hint="paratrain run starts Python training scripts; check the path and the file") from None


def address_towards(host: str) -> str | None:
    """This machine's address on the route to ``host`` (no packet is sent), or None when there is no route."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((socket.gethostbyname(host), 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def _interface_towards(host: str) -> str | None:
    """The network interface this machine would use to reach ``host`` (no packet is sent), or None."""
    import socket

    import psutil

    local = address_towards(host)
    if local is None:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addrs):
            return name
    return None


def method_env(cls: type, options: StrategyOptions, train: dict, timeout: float | None) -> dict[str, str]:
    """What a worker's Session reads to know its method, the method's options, the training options and the
    collective timeout — the same for `paratrain run` and `paratrain.launch`."""
    env = {STRATEGY_VAR: str(cls.method)}
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
    info = registry.info(cls.method)
    spec = format_spec(cls.method, options)
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

    if info.framework == "tensorflow":
        from paratrain.launcher import tfrun

        return tfrun.build(config, cls, options, env, str(script), spec)
    if info.launcher is Launcher.LOCAL:
        if (config.nproc or 1) > 1 or config.nnodes > 1:
            raise ConfigError(
                f"{cls.method} runs as one process, so --nproc {config.nproc} --nnodes {config.nnodes} "
                "cannot be honoured",
                hint=f"use --strategy ddp --nproc {config.nproc or 2} for several processes",
            )
        env[NPROC_VAR] = "1"
        threads = choose_threads(1, requested=config.threads)
        env["OMP_NUM_THREADS"] = str(threads.threads)
        # The same worker code as torchrun's processes (one-line errors, same exit codes), in a fork of this
        # process (launch/local.py); this command is what it amounts to.
        argv = [sys.executable, "-m", "paratrain.launcher.worker", str(script), *config.args]
        return LaunchPlan(config, spec, info.launcher, 1, env, argv, threads, details, cls)
    if info.launcher not in (Launcher.TORCHRUN, Launcher.HOROVODRUN):
        raise ConfigError(f"{cls.method} is launched by {info.launcher}, which this version cannot start yet")

    gpus = _gpu_count()
    if info.launcher is Launcher.HOROVODRUN:
        from paratrain.launcher import horovodrun

        nproc = horovodrun.check(config, gpus)
        threads = choose_threads(nproc, gpus=gpus, requested=config.threads)
        env.update({NPROC_VAR: str(nproc), "OMP_NUM_THREADS": str(threads.threads),
                    "TF_NUM_INTRAOP_THREADS": str(threads.threads),  # a Keras script's share, as under tfrun
                    **horovodrun.worker_env(config.timeout)})
        if script_framework(script) == "tensorflow":  # Horovod's Keras binding: TensorFlow as quiet as under tfrun
            from paratrain.launcher import tfrun

            tfrun.quiet(env, config.verbose)
        argv = horovodrun.argv(nproc, str(script), list(config.args), config.rendezvous_timeout)
        return LaunchPlan(config, spec, info.launcher, nproc, env, argv, threads, details, cls)
    nproc = config.nproc or (gpus if gpus else 2)
    if gpus and nproc > gpus:
        raise ConfigError(f"--nproc {nproc} asks for more processes than the {gpus} visible GPUs",
                          hint=f"use --nproc {gpus} or fewer (one process per GPU)")
    env[NPROC_VAR] = str(nproc)
    threads = choose_threads(nproc, gpus=gpus, requested=config.threads)
    env["OMP_NUM_THREADS"] = str(threads.threads)
    if config.max_restarts:
        # torchrun's agent shares one TCPStore with the workers across restarts, so a restarted gloo group can
        # read the dead attempt's addresses and hang or fail in connectFullMesh (half the restarts here). torch's
        # own opt-out gives each attempt a fresh store.
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    # Ctrl-C / SIGTERM: the workers get the signal, then SIGKILL after SHUTDOWN_GRACE_S (torchrun waits 30 s).
    argv = [f"--nproc-per-node={nproc}", f"--max-restarts={config.max_restarts}"]
    if _torchrun_knows("--shutdown-timeout"):  # torch ≥ 2.12; older torchruns wait their own 30 s
        argv.append(f"--shutdown-timeout={SHUTDOWN_GRACE_S}")
    if config.master:
        host, _, port = config.master.rpartition(":")
        argv += [f"--nnodes={config.nnodes}", f"--node-rank={config.node_rank}",
                 f"--master-addr={host}", f"--master-port={port}"]
        if config.rendezvous_timeout:
            argv += [f"--rdzv-conf=timeout={config.rendezvous_timeout}"]
        if config.nnodes > 1 and not gpus and "GLOO_SOCKET_IFNAME" not in os.environ:
            iface = _interface_towards(host)
            if iface:  # else gloo binds to whatever the hostname resolves to, often unreachable from other nodes
                env["GLOO_SOCKET_IFNAME"] = iface
    else:
        argv += ["--standalone"]
    argv += ["--module", "paratrain.launcher.worker", str(script), *config.args]
    return LaunchPlan(config, spec, info.launcher, nproc, env, argv, threads, details, cls)


def _quiet_torchrun(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.CRITICAL
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(level)


def execute(plan: LaunchPlan) -> int:
    """Run the plan; returns 0, or raises LaunchError carrying the failing rank's exit code."""
    choice = plan.threads
    if choice is not None and oversubscribed(plan.nproc, choice.threads, choice.cores):
        notice(f"{plan.nproc} process(es) × {choice.threads} thread(s) ({choice.reason}) on {choice.cores} core(s): "
               "oversubscribed — they take turns on the cores, and step times will show it")
    os.environ.update(plan.env)
    with tempfile.TemporaryDirectory(prefix="paratrain-notes-") as notes:
        os.environ[FAILURES_VAR] = notes
        try:
            _run(plan, Path(notes))
        finally:
            os.environ.pop(FAILURES_VAR, None)
        copies = _ran_independent_copies(plan, Path(notes))
        done = notes_.by_rank(Path(notes), "done")
        ran = plan.method_cls.ran_as(plan.config.strategy, Path(notes)) if plan.method_cls and not copies else None
    elapsed = time.time() - _process_start()
    if copies:
        notice(_independent_copies_line(plan, elapsed))
        return 0  # the script did what it was written to do; the line says it was not a parallel job
    if ran is not None and ran.note:
        notice(ran.note)
    notice(_finished_line(plan, done, elapsed, ran.spec if ran else plan.spec))
    return 0


def _finished_line(plan: LaunchPlan, done: dict[int, dict], elapsed: float, spec: str) -> str:
    """The job's last line: what ran, as the workers reported it — processes for the torch methods (each rank's
    own note) under the method the job reported (``spec``: a native DeepSpeed script's own stage), and for
    TensorFlow's the replicas of the strategy the script really built, never the flag."""
    if plan.launcher is not Launcher.TFCONFIG:
        what = f"{plan.world_size} process{'es' if plan.world_size > 1 else ''}"
        return f"{spec} × {what} ({'GPU' if _gpu_count() else 'CPU'}) finished in {elapsed:.1f} s"
    from paratrain.launcher import tfrun

    where = "GPU" if tfrun.gpu_count() else "CPU"
    replicas = _reported_replicas(plan, done)
    if plan.env.get(STRATEGY_VAR) == "mirrored":  # one process holding the replicas
        if replicas is None:
            return f"{spec}, replicas not reported ({where}) finished in {elapsed:.1f} s"
        line = f"{spec} × {_count(replicas, 'replica')} ({where}) finished in {elapsed:.1f} s"
        asked = int((plan.details or {}).get("replicas", replicas))
        if replicas != asked:
            built = done[0].get("strategy")
            by = "TensorFlow's default strategy" if built == "default" else f"the script's {built}"
            line += f"; --nproc asked for {asked}, {by} had {replicas}"
        return line
    what = f"{_count(plan.world_size, 'process', 'processes')}, "
    what += _count(replicas, "replica") if replicas is not None else "replicas not reported"
    return f"{spec} × {what} ({where}) finished in {elapsed:.1f} s"


def _reported_replicas(plan: LaunchPlan, done: dict[int, dict]) -> int | None:
    """The replicas every local worker of a TensorFlow job reported (the same number on each), or None when one
    did not (TensorFlow never imported, a strategy that could not count them) or they disagree."""
    counts = {d.get("replicas") for d in done.values()}
    if len(done) != plan.nproc or len(counts) != 1:
        return None
    (count,) = counts
    return count if isinstance(count, int) else None


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _run(plan: LaunchPlan, notes: Path) -> None:
    if plan.launcher is Launcher.LOCAL:
        _run_local(plan, notes)
    elif plan.launcher is Launcher.HOROVODRUN:
        from paratrain.launcher import horovodrun

        horovodrun.run(plan, notes)
    elif plan.launcher is Launcher.TFCONFIG:
        from paratrain.launcher import tfrun

        tfrun.run(plan, notes)
    else:
        _run_torchrun(plan, notes)


def _ran_independent_copies(plan: LaunchPlan, notes: Path) -> bool:
    """Did a multi-process launch run copies of a script that never joined its job (no Session, no
    init_process_group, no hvd.init)? N trainings that each saw all the data and wrote the same files, which
    "ddp × 2 processes finished" would misreport as one parallel job."""
    if plan.world_size < 2 or plan.launcher not in (Launcher.TORCHRUN, Launcher.HOROVODRUN, Launcher.TFCONFIG):
        return False  # under multiworker, "joined" means a strategy spanning the workers (launcher/tf_setup.py)
    return notes_.never_joined(notes, plan.nproc)


def _independent_copies_line(plan: LaunchPlan, elapsed: float) -> str:
    if plan.launcher is Launcher.TFCONFIG:
        never = "built a strategy spanning the workers (no ptf.strategy(), no MultiWorkerMirroredStrategy())"
    elif plan.launcher is Launcher.HOROVODRUN:
        never = "joined Horovod (no paratrain.Session, no hvd.init())"
    else:
        never = "joined a process group (no paratrain.Session, no init_process_group)"
    return (f"{plan.world_size} independent copies of {Path(plan.config.script).name} ran ({elapsed:.1f} s), not one "
            f"{plan.spec} job: the script never {never} — see Port your script in the README")


def _process_start() -> float:
    """When this launcher started (the wall time a user sees includes start-up, not just the training)."""
    import psutil

    return psutil.Process().create_time()


def _run_local(plan: LaunchPlan, notes: Path) -> None:
    from paratrain.launcher.local import run_script

    # The launcher imported torch before choosing the count, so the script's process sets it — unless it is the
    # user's own OMP_NUM_THREADS, which torch already read at import exactly as under `python train.py`.
    threads = plan.threads.threads if plan.threads and not plan.threads.from_environment else None
    code, interrupted = run_script(plan.config.script, list(plan.config.args), threads, plan.argv)
    if interrupted or code == 128 + signal.SIGINT:
        raise Interrupted(signal.SIGINT)
    if code != 0:
        what = f"exit code {notes_.exit_code(code)}"
        if code < 0:
            what += f", {notes_.signal_text(-code, notes_.finished(notes, 0))}"
        raise LaunchError(f"the {plan.spec} process failed ({what}); its output is above",
                          exit_code=notes_.exit_code(code))


def _run_torchrun(plan: LaunchPlan, notes: Path) -> None:
    from torch.distributed import DistError
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    # Only torchrun's own options go through its parser: argparse matches abbreviations anywhere in argv, so a
    # script argument such as --log or --local would be taken for (or ambiguous with) a torchrun option.
    split = plan.argv.index("--module") + 2
    args = torchrun.parse_args(plan.argv[:split])
    args.training_script_args = plan.argv[split:]
    _quiet_torchrun(plan.config.verbose)
    watchdog = Watchdog(notes, plan.world_size, plan.config.stall_timeout)
    try:
        with watchdog:
            torchrun.run(args)
    except SignalException as exc:  # Ctrl-C, a kill of the launcher, or the watchdog: the workers are stopped
        if watchdog.verdict:
            raise LaunchError(watchdog.verdict, hint=STALL_HINT) from None
        raise Interrupted(exc.sigval) from None
    except ChildFailedError as exc:
        _raise_first_failure(exc, notes, plan.world_size)
    except (DistError, RendezvousError) as exc:  # the job never formed: port taken, master unreachable
        raise _rendezvous_failure(plan.config, exc) from None


def _rendezvous_failure(config: RunConfig, exc: Exception) -> LaunchError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    where = config.master or "a local port"
    if "EADDRINUSE" in str(exc) or "address already in use" in str(exc).lower():
        return LaunchError(f"port {where.rpartition(':')[2]} of --master {where} is already in use on this machine; "
                           "paratrain does not pick another because --master fixes it",
                           hint="choose a free port in --master, or drop --master on one machine for a free one")
    if "timed out" in text.lower() or "timeout" in text.lower():
        waited = "node 0 at " + where if config.node_rank else f"the other {config.nnodes - 1} node(s) to join"
        return LaunchError(f"node {config.node_rank} gave up waiting for {waited}: {text}",
                           hint="start every node with the same --master HOST:PORT and --nnodes, check that the "
                                "address is reachable; --rendezvous-timeout sets how long to wait")
    return LaunchError(f"could not start the job at {where}: {text}",
                       hint="check --master HOST:PORT (free on node 0, reachable from every node)")


def _raise_first_failure(exc, notes: Path, world_size: int) -> None:
    rank, failure = exc.get_first_failure()
    # torchrun stops the healthy ranks with SIGTERM once one fails: those are never the cause.
    causes = {r: f for r, f in exc.failures.items() if f.exitcode != -signal.SIGTERM}
    if causes and rank not in causes:
        rank = min(causes, key=lambda r: (causes[r].timestamp, r))
        failure = causes[rank]
    noted = notes_.first_failure(notes)
    if noted is not None and noted["rank"] in exc.failures:
        rank, failure = noted["rank"], exc.failures[noted["rank"]]
    line = _failure_line(rank, failure, noted["error"] if noted and noted["rank"] == rank else None,
                         notes_.finished(notes, rank))
    hint = None
    lowered = line.lower()
    if "timed out" in lowered:
        # The rank that gave up waiting is not the one to blame: the progress notes say who left the lock-step.
        why = explain_timeout(notes, world_size)
        if why:
            line = f"{why}; rank {rank} gave up waiting after --timeout"
        else:
            stuck = sorted(r for r, f in exc.failures.items() if r != rank and f.exitcode < 0)
            if stuck:
                line += f"; rank(s) {', '.join(map(str, stuck))} never reached that collective"
        hint = STALL_HINT
    elif any(echo in lowered for echo in ("connection closed", "connection reset", "sigabrt")):
        # A broken connection or a gloo abort is often the echo of a lock-step error elsewhere.
        why = explain_timeout(notes, world_size)
        if why:
            line += f" ({why})"
            hint = STALL_HINT
    raise LaunchError(line, hint=hint, exit_code=notes_.exit_code(failure.exitcode)) from None


def _failure_line(rank: int, failure, noted: str | None = None, finished: bool = False) -> str:
    code = f"exit code {notes_.exit_code(failure.exitcode)}"
    if noted:  # the rank's own note of its error, written before anything could kill it
        return f"rank {rank} failed first ({code}): {noted}"
    if failure.exitcode < 0:  # a signal: name it, whatever torchrun's error file says ("<NONE>" when there is none)
        return f"rank {rank} failed first ({code}): {notes_.signal_text(-failure.exitcode, finished)}"
    data = failure.error_file_data or {}
    message = data.get("message") if isinstance(data, dict) else None
    text = ""
    if isinstance(message, dict):
        text = str(message.get("message", "")).strip()
    elif message:
        text = str(message).strip()
    if text in ("<NONE>", "<N/A>"):
        text = ""
    return f"rank {rank} failed first ({code}): {notes_.cause_line(text) or 'see its output above'}"
