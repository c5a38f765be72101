"""torch's own launcher, ``torch.distributed.run`` (torchrun), called in-process.

Rendezvous, restarts and per-rank error files are torchrun's; paratrain adds the process count's default, the
multi-node arguments, a watchdog for stalled ranks and the one line that names the rank that failed first.

Each rank is a fresh interpreter (``python -u -m paratrain.launcher.worker SCRIPT``), started the way torchrun
starts a script's ranks, with SIGINT held until the worker can take it quietly (``job.holding_sigint``).
paratrain once forked the ranks from a forkserver that had imported torch (1.35 s sooner for ddp×2 here), and gave
that up: a forked rank shares its parent's random state and hash seed, and its life after the script — inside
torch's multiprocessing wrapper, waiting for its peers — is where a finished job hung (a process group torn down
while the collector held the GIL) and where a signal at start-up could leave ranks behind. A rank that is its own
process behaves as under torchrun, which is the promise.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from paratrain import exiting
from paratrain.errors import LaunchError
from paratrain.launcher import job
from paratrain.launcher import notes as notes_
from paratrain.launcher.addresses import interface_towards
from paratrain.launcher.config import RunConfig
from paratrain.launcher.job import STALL_HINT, Interrupted, Launch, LaunchPlan
from paratrain.launcher.threads import choose_threads
from paratrain.launcher.watchdog import Watchdog, explain_timeout


class Torchrun(job.ModuleLauncher):
    name = "torchrun"
    runs_torch = True
    module = "torch.distributed.run"
    joined_what = "a process group (no paratrain.Session, no init_process_group)"

    def plan(self, launch: Launch) -> LaunchPlan:
        from paratrain.distenv import NPROC_VAR

        config, env = launch.config, launch.env
        gpus = job.gpu_count()
        nproc = job.processes(config.nproc, gpus)
        env[NPROC_VAR] = str(nproc)
        threads = choose_threads(nproc, gpus=gpus, requested=config.threads)
        env["OMP_NUM_THREADS"] = str(threads.threads)
        if config.max_restarts:
            # torchrun's agent shares one TCPStore with the workers across restarts, so a restarted gloo group can
            # read the dead attempt's addresses and hang or fail in connectFullMesh (half the restarts here).
            # torch's own opt-out gives each attempt a fresh store.
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        # Ctrl-C / SIGTERM: the workers get the signal, then SIGKILL after SHUTDOWN_GRACE_S (torchrun waits 30 s).
        argv = [f"--nproc-per-node={nproc}", f"--max-restarts={config.max_restarts}"]
        if _torchrun_knows("--shutdown-timeout"):  # torch ≥ 2.12; older torchruns wait their own 30 s
            argv.append(f"--shutdown-timeout={job.SHUTDOWN_GRACE_S}")
        if config.master:
            host, _, port = config.master.rpartition(":")
            argv += [f"--nnodes={config.nnodes}", f"--node-rank={config.node_rank}",
                     f"--master-addr={host}", f"--master-port={port}"]
            if config.rendezvous_timeout:
                argv += [f"--rdzv-conf=timeout={config.rendezvous_timeout}"]
            if config.nnodes > 1 and not gpus and "GLOO_SOCKET_IFNAME" not in os.environ:
                iface = interface_towards(host)
                if iface:  # else gloo binds to whatever the hostname resolves to, often unreachable from other nodes
                    env["GLOO_SOCKET_IFNAME"] = iface
        else:
            argv += ["--standalone"]
        argv += ["--module", "paratrain.launcher.worker", str(launch.script), *config.args]
        return LaunchPlan(config, launch.spec, self.name, nproc, env, argv, threads, launch.details,
                          launch.method_cls)

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        _run_torchrun(plan, notes)


BACKEND = Torchrun()


def _torchrun_knows(flag: str) -> bool:
    """Whether the installed torchrun takes ``flag``: paratrain runs on the torch the user has, and an unknown flag
    would fail every launch with torchrun's own usage error."""
    from torch.distributed.run import get_args_parser

    return any(flag in action.option_strings for action in get_args_parser()._actions)


def _quiet_torchrun(verbose: bool) -> None:
    """torchrun's agent (and torch's process contexts) log every rank they stop once one failed ("Sending process …
    closing signal SIGTERM", "Terminating process … via signal SIGTERM"): paratrain's last line already says which
    rank failed and why, so those lines only show with --verbose."""
    level = logging.INFO if verbose else logging.CRITICAL
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed", "torch.multiprocessing")):
            logging.getLogger(name).setLevel(level)


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
    _hold_sigint(args)
    _quiet_torchrun(plan.config.verbose)
    watchdog = Watchdog(notes, plan.world_size, plan.config.stall_timeout)
    try:
        with watchdog:
            exiting.check_signals()  # after this function's imports
            torchrun.run(args)
    except SignalException as exc:  # Ctrl-C, a kill of the launcher, or the watchdog: the workers are stopped
        _stop_strays(exc.sigval)
        if watchdog.verdict:
            raise LaunchError(watchdog.verdict, hint=STALL_HINT) from None
        raise Interrupted(exc.sigval) from None
    except ChildFailedError as exc:
        _raise_first_failure(exc, notes, plan.world_size)
    except (DistError, RendezvousError) as exc:  # the job never formed: port taken, master unreachable
        raise _rendezvous_failure(plan.config, exc) from None


def _stop_strays(signum: int) -> None:
    """Stop the ranks torchrun started but lost track of, as it stops the others: ``signum``, then SIGKILL after
    SHUTDOWN_GRACE_S. A signal that lands while torchrun is starting them raises out of the loop that records them
    (torch's SubprocessContext._start), so its shutdown stops none, and the ranks, each in a session of its own, ran
    on after the launcher had said every process was stopped (2 Ctrl-C in 22 at that moment here, on a busy
    machine)."""
    import psutil

    strays = []
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):
            if "paratrain.launcher.worker" in child.cmdline():
                strays.append(child)
                child.send_signal(signum)
    _, alive = psutil.wait_procs(strays, timeout=job.SHUTDOWN_GRACE_S)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=job.SHUTDOWN_GRACE_S)


def _hold_sigint(args) -> None:
    """Each rank starts as ``python -u -m paratrain.launcher.worker …`` still, with SIGINT held until the worker's
    handler is in place (:func:`job.holding_sigint`): torchrun's own ``--no-python`` runs that command as given."""
    python = os.getenv("PYTHON_EXEC", sys.executable)  # torchrun's own choice of interpreter
    command = job.holding_sigint([python, "-u", "-m", args.training_script, *args.training_script_args])
    if command[0] == python:  # this system cannot hold it: torchrun's usual command
        return
    args.module, args.no_python = False, True
    args.training_script, args.training_script_args = command[0], command[1:]


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
    refused = job.refused(notes)
    if refused is not None:
        raise refused from None
    rank, failure = exc.get_first_failure()
    # torchrun stops the healthy ranks with SIGTERM once one fails: those are never the cause.
    causes = {r: f for r, f in exc.failures.items() if f.exitcode != -signal.SIGTERM}
    if causes and rank not in causes:
        rank = min(causes, key=lambda r: (causes[r].timestamp, r))
        failure = causes[rank]
    noted = notes_.first_failure(notes)
    silent = notes_.silent_failure(notes, sorted(causes, key=lambda r: (causes[r].timestamp, r)))
    code = failure.exitcode
    if silent is not None:  # killed without a word: the others' notes only echo its loss
        rank, failure, noted, code = silent, causes[silent], None, causes[silent].exitcode
    elif noted is not None:
        # torch lists the first process it saw end, which can be an echo of the rank that failed (it was still
        # printing its traceback). The ranks' own timed notes decide.
        rank = noted["rank"]
        if rank in exc.failures:
            failure = exc.failures[rank]
            code = failure.exitcode
        else:
            code = int(noted.get("code", 1))
    line = _failure_line(rank, code, failure, noted["error"] if noted and noted["rank"] == rank else None,
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
    elif notes_.is_echo(lowered):
        # A broken connection or a gloo abort is often the echo of a lock-step error elsewhere.
        why = explain_timeout(notes, world_size)
        if why:
            line += f" ({why})"
            hint = STALL_HINT
    raise LaunchError(line, hint=hint, exit_code=notes_.exit_code(code)) from None


def _failure_line(rank: int, exitcode: int, failure, noted: str | None = None, finished: bool = False) -> str:
    code = f"exit code {notes_.exit_code(exitcode)}"
    if noted:  # the rank's own note of its error, written before anything could kill it
        return f"rank {rank} failed first ({code}): {noted}"
    if exitcode < 0:  # a signal: name it, whatever torchrun's error file says ("<NONE>" when there is none)
        return f"rank {rank} failed first ({code}): {notes_.signal_text(-exitcode, finished)}"
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
