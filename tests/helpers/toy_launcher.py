"""A launcher written the way a new cluster engine's would be: one class implementing paratrain's launcher protocol
(:class:`paratrain.launcher.job.Backend`), registered from a test, touching no other source file.

It starts each rank as a plain subprocess with the ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` contract torchrun would
give it, waits for all of them, and names the rank that failed first from the workers' own notes — the parts a
Ray, Kubernetes or MPI launcher would replace with its own API.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from paratrain.distenv import NPROC_VAR
from paratrain.errors import LaunchError
from paratrain.launcher import job
from paratrain.launcher import notes as notes_
from paratrain.launcher.job import Launch, LaunchPlan


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ToyLauncher:
    name = "toy"
    starts_workers = True
    runs_torch = False

    def __init__(self) -> None:
        self.started: list[dict[str, str]] = []  # each rank's own variables, for the test to look at

    def plan(self, launch: Launch) -> LaunchPlan:
        nproc = job.processes(launch.config.nproc, gpus=0)
        launch.env[NPROC_VAR] = str(nproc)
        argv = [sys.executable, "-m", "paratrain.launcher.worker", str(launch.script), *launch.config.args]
        return LaunchPlan(launch.config, launch.spec, self.name, nproc, launch.env, argv, None, launch.details,
                          launch.method_cls)

    def shell_line(self, plan: LaunchPlan) -> str:
        return f"toy-launch -n {plan.nproc} -- {job.env_line(plan.env)} {' '.join(plan.argv)}"

    def run(self, plan: LaunchPlan, notes: Path) -> None:
        import os

        port = str(_free_port())
        procs = []
        for rank in range(plan.nproc):
            own = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(plan.nproc),
                   "LOCAL_WORLD_SIZE": str(plan.nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
            self.started.append(own)
            procs.append(subprocess.Popen(plan.argv, env={**os.environ, **own}))
        codes = [p.wait(timeout=300) for p in procs]
        if any(codes):
            noted = notes_.first_failure(notes)
            rank = noted["rank"] if noted else next(r for r, c in enumerate(codes) if c)
            why = noted["error"] if noted else "see its output above"
            raise LaunchError(f"toy: rank {rank} failed first: {why}", exit_code=codes[rank] or 1)

    def ran_line(self, plan: LaunchPlan, done: Mapping[int, dict], spec: str, elapsed: float) -> str:
        return f"toy ran {spec} on {len(done)} of {plan.nproc} ranks"

    def never_joined(self) -> str:
        return "joined the toy's job"
