"""`paratrain run`: the same script under any method, on one machine or several."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from paratrain import console
from paratrain.cli._optional_values import NEGATIVE
from paratrain.cli._render import help_text, print_json
from paratrain.cli._train_flags import train_flags

HELP = """Run SCRIPT under a training method.

Everything after SCRIPT is passed to it unchanged. torch methods start through torchrun
(torch.distributed.run: rendezvous, restarts, per-rank error files); single and dp run as one process.
The method reaches the script's paratrain.Session through PARATRAIN_* variables, and plain torchrun
scripts (init_process_group from RANK/WORLD_SIZE) run unchanged too.

Options may also come from paratrain.toml in the current directory, or --config FILE (flags win).
The training options (their own panel below) reach the script's
Session and mean the same under every method; the script may set them in Session(...) instead, but not to
a different value.

Examples:
  paratrain run --strategy ddp --nproc 2 train.py --lr 3e-4
  paratrain run -s fsdp:shard=grad_op -n 4 train.py
  paratrain run -s ddp --nnodes 2 --node-rank 0 --master node0:29500 train.py
  srun --ntasks-per-node=1 paratrain run -s ddp -n 4 train.py  # under SLURM

A stuck job never hangs silently: --timeout bounds every collective, --stall-timeout stops a job whose
rank left the lock-step (and names it), --max-restarts with --checkpoint-dir/--checkpoint-every resumes
a job after a worker dies from its newest complete checkpoint.
"""


@train_flags()
def run(
    script: str = typer.Argument(None, metavar="SCRIPT", help="Your training script.", show_default=False),
    args: list[str] = typer.Argument(None, metavar="[ARGS]...", help="Arguments for the script.",
                                     show_default=False),
    strategy: str = typer.Option(None, "--strategy", "-s",
                                 help="Method spec: single, dp, ddp, fsdp[:shard=full|grad_op|none], ... "
                                      "(default ddp; see `paratrain strategies`)."),
    nproc: int = typer.Option(None, "--nproc", "-n",
                              help="Processes per node (default: one per visible GPU, 2 on a CPU-only machine)."),
    nnodes: int = typer.Option(None, "--nnodes", help="Number of machines (default 1)."),
    node_rank: int = typer.Option(None, "--node-rank", help="This machine's index, 0..nnodes-1."),
    master: str = typer.Option(None, "--master", help="HOST:PORT of node 0 (default: a free local port)."),
    max_restarts: int = typer.Option(None, "--max-restarts", help="Restart the whole job up to K times."),
    timeout: float = typer.Option(None, "--timeout",
                                  help="Seconds any collective may wait before a stuck rank becomes an error."),
    checkpoint_dir: str = typer.Option(None, "--checkpoint-dir",
                                       help="Save a Session script's state here every --checkpoint-every steps; "
                                            "a restarted job (--max-restarts) resumes from the newest one."),
    checkpoint_every: int = typer.Option(None, "--checkpoint-every", help="Optimizer steps between checkpoints."),
    keep: int = typer.Option(None, "--keep", help="Newest periodic checkpoints to keep (default 2)."),
    rendezvous_timeout: int = typer.Option(None, "--rendezvous-timeout",
                                           help="Seconds a node waits for the others (and for --master) to "
                                                "join before it gives up (default: torchrun's, 600)."),
    stall_timeout: float = typer.Option(None, "--stall-timeout",
                                        help="Stop the job when a rank has waited this many seconds in a collective "
                                             "(a Session script's watchdog), naming the rank that left the "
                                             "lock-step. Default: off."),
    config: str = typer.Option(None, "--config", help="TOML file with these options (default ./paratrain.toml)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved options and command; run nothing."),
    json_out: bool = typer.Option(False, "--json", help="With --dry-run: print the plan as JSON."),
    threads: int = typer.Option(None, "--threads",
                                help="CPU threads per process (OpenMP and torch intra-op). Default: "
                                     "OMP_NUM_THREADS if set, else the cores this job may use divided by the "
                                     "processes per node (1 per process with GPUs, as torchrun does)."),
    verbose: bool = typer.Option(None, "--verbose", "-v", help="Show torchrun's own logging."),
    **train: Any,
) -> Callable[[], int] | None:
    from paratrain.errors import ConfigError
    from paratrain.launcher import build_plan, cluster, execute, load_config
    from paratrain.launcher.config import merge

    if json_out and not dry_run:
        raise ConfigError("--json only applies to --dry-run", hint="add --dry-run, or drop --json")
    flags = {"strategy": strategy, "nproc": nproc, "nnodes": nnodes, "node_rank": node_rank, "master": master,
             "max_restarts": max_restarts, "timeout": timeout,
             "stall_timeout": stall_timeout, "rendezvous_timeout": rendezvous_timeout, "checkpoint_dir": checkpoint_dir,
             "checkpoint_every": checkpoint_every, "keep": keep, "threads": threads, "verbose": verbose,
             **train, "script": script, "args": list(args or [])}
    values = {**cluster.defaults(os.environ), **load_config(config)}  # the scheduler's < paratrain.toml < flags
    settings = merge(values, flags)
    _note_flags_after_script(settings.script, settings.args)
    if _runs_torch(settings.strategy):
        _import_torch_quietly(bool(settings.verbose))
    plan = build_plan(settings)
    if dry_run:
        info = {"config": plan.config.as_dict(), "strategy": plan.spec, "launcher": str(plan.launcher),
                "nproc_per_node": plan.nproc, "world_size": plan.world_size, "env": plan.env,
                "threads_per_process": plan.threads.threads if plan.threads else None,
                "threads_reason": plan.threads.reason if plan.threads else None,
                "command": plan.command_line(), **(plan.details or {})}
        if json_out:
            print_json(info)
        else:
            lines = [f"{key:15} {info[key]}" for key in ("strategy", "launcher", "nproc_per_node", "world_size")]
            if plan.threads is not None:
                lines.append(f"{'threads':15} {plan.threads.threads} per process ({plan.threads.reason})")
            lines += [f"{key:15} {value}" for key, value in plan.config.as_dict().items()]
            lines.append(f"command        {info['command']}")
            lines += [f"{key:15} {value if isinstance(value, str) else json.dumps(value, indent=2)}"
                      for key, value in (plan.details or {}).items()]
            for line in lines:
                console.out.print(line, markup=False)
        return
    # Run the job once the command line is parsed, from main() rather than from inside click's call stack:
    # torchrun's rendezvous calls inspect.stack() for every event it logs, and each extra frame costs start-up.
    return lambda: execute(plan)


def _our_long_flags() -> set[str]:
    """Every long flag of `paratrain run` (``--dry-run``, ``--no-sync-batchnorm``, …), from its own signature."""
    import inspect

    flags = set()
    for param in inspect.signature(run).parameters.values():
        for decl in getattr(param.default, "param_decls", None) or ():
            flags.update(f for f in decl.split("/") if f.startswith("--"))
    return flags | {negative for negative, (positive, _) in NEGATIVE.items() if positive in flags}


def _note_flags_after_script(script: str | None, args: list[str]) -> None:
    """One line when a flag of paratrain's follows the script (``train.py --dry-run``): it still goes to the script,
    as everything after the script does, but the user probably meant it for paratrain (a --dry-run there runs the
    job). Flags the script's own text mentions (``--seed`` in its argparse, or ``dry_run``) are its own: no note."""
    if not script or not args:
        return
    ours = _our_long_flags()
    given = list(dict.fromkeys(a.split("=", 1)[0] for a in args if a.split("=", 1)[0] in ours))
    if not given:
        return
    try:
        text = Path(script).read_text(errors="replace")
    except OSError:
        return
    theirs = [f for f in given if f not in text and f[2:].replace("-", "_") not in text]
    if theirs:
        name = Path(script).name
        goes, it = ("go", "them") if len(theirs) > 1 else ("goes", "it")
        console.notice(f"{', '.join(theirs)} after {name} {goes} to {name}, not to paratrain (everything after the "
                       f"script is the script's); put {it} before {name} to give {it} to paratrain")


def _runs_torch(spec: str) -> bool:
    """Whether this method's launcher runs torch's own code here (torchrun's agent), so torch is imported early with
    its C++ logs quieted. A TensorFlow launch never imports torch (1.7 s saved); Horovod's imports it unquieted, to
    resolve its torch method class, and runs none of torch's code."""
    from paratrain.errors import ParatrainError
    from paratrain.launcher import job
    from paratrain.strategies import registry
    from paratrain.strategies.base import parse_spec

    try:
        return job.backend(registry.info(parse_spec(spec)[0]).launcher).runs_torch
    except ParatrainError:
        return False  # build_plan reports the bad spec


def _import_torch_quietly(verbose: bool) -> None:
    """The launcher's own torch logs only fatal C++ messages (a rendezvous retry would print a 50-frame stack);
    the level is read once, when torch loads, so the workers — which inherit the environment — keep theirs."""
    import sys

    if verbose or "torch" in sys.modules or "TORCH_CPP_LOG_LEVEL" in os.environ:
        return
    from paratrain.launcher.torch_import import load_torch

    os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        load_torch()
    finally:
        del os.environ["TORCH_CPP_LOG_LEVEL"]


def register(app: typer.Typer) -> None:
    app.command(
        "run",
        help=help_text(HELP),
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )(run)
