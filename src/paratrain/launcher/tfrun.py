"""Launching the TensorFlow methods: ``mirrored`` as one process, ``multiworker`` as one process per worker with
its ``TF_CONFIG``.

TensorFlow has no launcher of its own (a cluster manager is expected to start the workers), so this module is that
manager: it writes each worker's cluster spec — free local ports on one machine; across machines the nodes swap
their workers' addresses through a ``torch.distributed.TCPStore`` at ``--master`` — starts the workers through
paratrain's worker (one-line errors, the same failure notes as torchrun's ranks) and supervises them. It fills the
gaps measured in TensorFlow's own behaviour:

- a worker that dies makes its peers fail only after seconds (2-12 s here), and a peer stopped by SIGTERM may
  ignore it: the first failure stops every worker at once (SIGTERM, then SIGKILL after a grace period), and the
  error names the worker;
- a worker that never joins (its port taken, its node never started) leaves the others waiting in silence for
  minutes: scripts using ``paratrain.tf`` note when they start waiting and when everybody has joined, and a job
  that has not formed by the start-up deadline (``--rendezvous-timeout``, default 120 s) is stopped with the
  workers that never joined named. Ports fixed by ``multiworker:port=N`` are checked before anything starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from paratrain.distenv import NPROC_VAR, STRATEGY_VAR, TF_CONFIG_VAR
from paratrain.errors import ConfigError, LaunchError
from paratrain.launcher import job as jobs
from paratrain.launcher import notes as notes_
from paratrain.launcher.config import RunConfig
from paratrain.launcher.job import Interrupted, Launch, LaunchPlan

START_DEADLINE_S = 120
GRACE_S = 3
POLL_S = 0.1


def gpu_count() -> int:
    from paratrain.devices.inventory import collect

    return len(collect().gpus)


class Tfconfig:
    """Both TensorFlow methods are started and supervised here (mirrored: one process holding all the replicas)."""

    name = "tfconfig"
    starts_workers = True
    runs_torch = False

    def plan(self, launch: Launch) -> LaunchPlan:
        """The plan of a TensorFlow launch (see the module docstring)."""
        from paratrain.launcher.tf_import import quiet_env
        from paratrain.launcher.threads import choose_threads

        config, env, method = launch.config, launch.env, launch.method
        gpus = gpu_count()
        nproc = check(config, method, gpus)
        processes = 1 if _one_process(method) else nproc
        threads = choose_threads(processes, gpus=gpus, requested=config.threads)
        env.update({NPROC_VAR: str(nproc), "OMP_NUM_THREADS": str(threads.threads),
                    "TF_NUM_INTRAOP_THREADS": str(threads.threads)})
        quiet_env(env, config.verbose)
        if not _one_process(method):
            # Keras 3's fit fails under MultiWorkerMirroredStrategy (keras-team/keras#20585); tf_keras works.
            env.setdefault("TF_USE_LEGACY_KERAS", os.environ.get("TF_USE_LEGACY_KERAS", "1"))
            port = getattr(launch.options, "port", None)
            env[TF_CONFIG_VAR] = json.dumps(local_workers(config, nproc, port))  # all nodes' once run() exchanged
        argv = [sys.executable, "-m", "paratrain.launcher.worker", str(launch.script), *config.args]
        details = {**(launch.details or {}), "replicas": nproc}
        return LaunchPlan(config, launch.spec, self.name, processes, env, argv, threads, details, launch.method_cls)

    def shell_line(self, plan: LaunchPlan) -> str:
        shown = dict(plan.env)
        note = ""
        if TF_CONFIG_VAR in shown:  # show worker 0's TF_CONFIG
            workers = json.loads(shown.pop(TF_CONFIG_VAR))
            shown["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}})
            note = f"  # worker 0 of {len(workers)}; worker i gets task index i"
        return f"{jobs.env_line(shown)} {shlex.join(plan.argv)}{note}".strip()

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        run(plan, notes)

    def ran_line(self, plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
        """What ran: the replicas of the strategy the script really built, never the flag."""
        where = "GPU" if gpu_count() else "CPU"
        replicas = _reported_replicas(plan, done)
        if _one_process(plan.env[STRATEGY_VAR]):  # one process holding the replicas
            if replicas is None:
                return f"{spec}, replicas not reported ({where}) finished in {elapsed:.1f} s"
            line = f"{spec} × {jobs.count(replicas, 'replica')} ({where}) finished in {elapsed:.1f} s"
            asked = int((plan.details or {}).get("replicas", replicas))
            if replicas != asked:
                built = done[0].get("strategy")
                by = "TensorFlow's default strategy" if built == "default" else f"the script's {built}"
                line += f"; --nproc asked for {asked}, {by} had {replicas}"
            return line
        what = f"{jobs.count(plan.world_size, 'process', 'processes')}, "
        what += jobs.count(replicas, "replica") if replicas is not None else "replicas not reported"
        return f"{spec} × {what} ({where}) finished in {elapsed:.1f} s"

    def never_joined(self) -> str:
        return "built a strategy spanning the workers (no ptf.strategy(), no MultiWorkerMirroredStrategy())"


def _reported_replicas(plan: LaunchPlan, done: Mapping[int, dict]) -> int | None:
    """The replicas every local worker of a TensorFlow job reported (the same number on each), or None when one
    did not (TensorFlow never imported, a strategy that could not count them) or they disagree."""
    counts = {d.get("replicas") for d in done.values()}
    if len(done) != plan.nproc or len(counts) != 1:
        return None
    (replicas,) = counts
    return replicas if isinstance(replicas, int) else None


def _one_process(method: str) -> bool:
    """One process holding every replica (mirrored), rather than one process per worker (multiworker)."""
    from paratrain.strategies import registry

    return not registry.info(method).multi_process


def check(config: RunConfig, method: str, gpus: int) -> int:
    """What the TensorFlow methods cannot take from paratrain's flags; returns replicas (mirrored) or workers."""
    given = {k: v for k, v in config.train_options().items() if v is not None}
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in sorted(given))
        raise ConfigError(f"{flags}: training options of the PyTorch Session, which a Keras script does not use",
                          hint="set precision, clipping and accumulation in Keras (compile(), the optimizer)")
    if config.max_restarts:
        raise ConfigError("--max-restarts is torchrun's; a TensorFlow job resumes with Keras' BackupAndRestore",
                          hint="pass --checkpoint-dir DIR (ptf.callbacks() adds BackupAndRestore) and run it again")
    if config.stall_timeout:
        raise ConfigError("--stall-timeout watches Session steps; it does not apply to a Keras script",
                          hint="drop --stall-timeout; --timeout bounds each TensorFlow collective")
    if _one_process(method) and (config.nnodes > 1 or config.master):
        raise ConfigError(f"{method} runs in one process on one machine, so --nnodes/--master cannot be honoured",
                          hint="use --strategy multiworker --nnodes N --master HOST:PORT across machines")
    return jobs.processes(config.nproc, gpus, "replicas" if _one_process(method) else "workers")


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _check_free(ports: list[int]) -> None:
    for index, port in enumerate(ports):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                raise LaunchError(f"port {port} for worker {index} is already in use on this machine",
                                  hint="choose other ports with multiworker:port=N (workers take N, N+1, ...), or "
                                       "drop the option for free ones") from None


def _local_address(master: str) -> str:
    """This machine's address as the other nodes reach it (on the route towards the master)."""
    from paratrain.launcher.addresses import address_towards

    return address_towards(master.rpartition(":")[0]) or socket.gethostname()


def local_workers(config: RunConfig, nproc: int, base_port: int | None) -> list[str]:
    """This node's workers' host:port (free ports unless ``port=`` fixed them; fixed ones are checked)."""
    ports = list(range(base_port, base_port + nproc)) if base_port else _free_ports(nproc)
    if base_port:
        _check_free(ports)
    host = "localhost" if config.nnodes == 1 else _local_address(config.master or "")
    return [f"{host}:{p}" for p in ports]


def exchange(config: RunConfig, mine: list[str]) -> list[str]:
    """Every worker's host:port in rank order, node by node: each node's launcher publishes its own at --master
    (a TCPStore that node 0 hosts) and reads the others'. Node 0 keeps the store up until every node has read."""
    from datetime import timedelta

    from torch.distributed import TCPStore

    host, _, port = (config.master or "").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--master {config.master!r} is not HOST:PORT", hint="e.g. --master node0:29500")
    wait = config.rendezvous_timeout or START_DEADLINE_S
    try:
        store = TCPStore(host, int(port), config.nnodes, config.node_rank == 0, timeout=timedelta(seconds=wait))
        store.set(f"node{config.node_rank}", ",".join(mine))
        keys = [f"node{r}" for r in range(config.nnodes)]
        store.wait(keys)
        workers = [a for k in keys for a in store.get(k).decode().split(",")]
        store.add("read", 1)
        end = time.time() + wait
        while config.node_rank == 0 and store.add("read", 0) < config.nnodes and time.time() < end:
            time.sleep(POLL_S)
        return workers
    except (RuntimeError, OSError) as exc:
        said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LaunchError(f"node {config.node_rank} could not exchange worker addresses at --master {config.master}: "
                          f"{said}", hint="start every node with the same --master HOST:PORT and --nnodes (HOST:PORT "
                                          "free on node 0, reachable from every node); --rendezvous-timeout sets how "
                                          "long to wait") from None


def worker_envs(plan: LaunchPlan) -> list[dict[str, str]]:
    """Each local worker's extra environment: its TF_CONFIG and the RANK/WORLD_SIZE contract."""
    if TF_CONFIG_VAR not in plan.env:  # one process holding every replica (mirrored)
        return [{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}]
    workers = json.loads(plan.env[TF_CONFIG_VAR])
    first = plan.config.node_rank * plan.nproc
    out = []
    for local in range(plan.nproc):
        index = first + local
        spec = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        out.append({"TF_CONFIG": json.dumps(spec), "RANK": str(index), "WORLD_SIZE": str(len(workers)),
                    "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(plan.nproc)})
    return out


class _Job:
    """The worker processes of this node. They stay in the launcher's process group: Ctrl-C in the terminal reaches
    them as it does under torchrun, and whoever stops the launcher's group (compare's runner) stops them too."""

    def __init__(self, plan: LaunchPlan) -> None:
        self.plan = plan
        self.procs: list[subprocess.Popen] = []
        self.ranks: list[int] = []
        self.exited: dict[int, tuple[int, float]] = {}  # rank -> (exit code, when the launcher saw it)

    def start(self) -> None:
        base = {k: v for k, v in os.environ.items() if k != TF_CONFIG_VAR}
        for extra in worker_envs(self.plan):
            self.procs.append(subprocess.Popen(jobs.holding_sigint(self.plan.argv), env={**base, **extra}))
            self.ranks.append(int(extra["RANK"]))

    def poll(self) -> None:
        for rank, proc in zip(self.ranks, self.procs, strict=True):
            if rank not in self.exited and proc.poll() is not None:
                self.exited[rank] = (proc.returncode, time.time())

    @property
    def done(self) -> bool:
        return len(self.exited) == len(self.procs)

    def failed(self) -> list[int]:
        return sorted((r for r, (code, _) in self.exited.items() if code != 0), key=lambda r: self.exited[r][1])

    def stop(self, first: int = signal.SIGTERM) -> None:
        """SIGTERM (or the given signal) to every worker still running, SIGKILL to those left after the grace."""
        for sig in (first, signal.SIGKILL):
            for proc in self.procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(sig)
            end = time.time() + GRACE_S
            while time.time() < end and any(p.poll() is None for p in self.procs):
                time.sleep(POLL_S)
        for proc in self.procs:
            proc.wait()
        self.poll()


def run(plan: LaunchPlan, notes: Path) -> None:
    if plan.config.nnodes > 1 and TF_CONFIG_VAR in plan.env:  # before any worker exists: Ctrl-C just stops here
        try:
            plan.env[TF_CONFIG_VAR] = json.dumps(exchange(plan.config, json.loads(plan.env[TF_CONFIG_VAR])))
        except KeyboardInterrupt:
            raise Interrupted(signal.SIGINT) from None
    job = _Job(plan)
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        received.append(signum)

    restore_signals = jobs.keep_signals()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    deadline = plan.config.rendezvous_timeout or START_DEADLINE_S
    started = time.time()
    try:
        job.start()
        while True:
            job.poll()
            if received:
                job.stop(signal.SIGINT if received[0] == signal.SIGINT else signal.SIGTERM)
                raise Interrupted(received[0])
            if job.failed():
                job.stop()
                raise _failure(job, notes)
            if job.done:
                return
            waiting, joined = notes_.by_rank(notes, "waiting"), notes_.by_rank(notes, "joined")
            if waiting and len(joined) < len(job.procs) and time.time() - started > deadline:
                job.stop(signal.SIGKILL)  # a worker waiting for its cluster ignores SIGTERM
                raise _not_formed(plan, job, waiting, joined, deadline)
            time.sleep(POLL_S)
    finally:
        restore_signals()


def _not_formed(plan: LaunchPlan, job: _Job, waiting: dict, joined: dict, deadline: float) -> LaunchError:
    missing = [r for r in job.ranks if r not in waiting]
    if missing:
        what = f"worker(s) {', '.join(map(str, missing))} never reached ptf.strategy()"
    elif plan.config.nnodes > 1:
        what = "the workers on the other node(s) never joined"
    else:
        what = "the workers started but could not connect to each other"
    return LaunchError(f"the multiworker job did not form within the {deadline:g} s start-up deadline: {what}; every "
                       "worker paratrain started was stopped",
                       hint="check that every node was started with the same --nnodes/--master and that the workers' "
                            "ports are reachable; --rendezvous-timeout sets the deadline", exit_code=1)


def _failure(job: _Job, notes: Path) -> LaunchError:
    failed = job.failed()
    noted = notes_.first_failure(notes)
    silent = notes_.silent_failure(notes, failed)
    first = failed[0] if silent is None else silent
    code = job.exited[first][0]
    refused = jobs.refused(notes)
    if code >= 0 and refused is not None and silent is None:
        return refused
    if code >= 0 and noted is not None and silent is None:  # a worker's own note: the cause
        own = int(noted.get("code", 1))
        return LaunchError(f"worker {noted['rank']} failed first (exit code {own}): {noted['error']}; the other "
                           "workers were stopped", exit_code=own)
    exit_code = notes_.exit_code(code)
    what = f"exit code {exit_code}"
    if code < 0:
        what += f", {notes_.signal_text(-code, notes_.finished(notes, first))}"
    return LaunchError(f"worker {first} failed first ({what}); the other workers were stopped", exit_code=exit_code)


BACKEND = Tfconfig()

__all__ = ["BACKEND", "check", "exchange", "local_workers", "run", "worker_envs"]
