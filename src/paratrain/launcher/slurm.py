"""Defaults for a multi-node launch inside a SLURM allocation (a :mod:`paratrain.launcher.cluster` environment).

Run ``srun --ntasks-per-node=1 paratrain run -s ddp -n 4 train.py`` in an allocation of N nodes: each node's
``paratrain run`` reads ``SLURM_NNODES`` (→ ``--nnodes``), ``SLURM_NODEID`` (→ ``--node-rank``) and the first host of
``SLURM_JOB_NODELIST`` (→ ``--master HOST:PORT``, the port derived from the job id so that two jobs sharing a node do
not collide). Flags and ``paratrain.toml`` still win. Nothing is derived for a one-node allocation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from paratrain.errors import ConfigError

BASE_PORT = 29500


def expand_hostlist(text: str) -> list[str]:
    """``node[01-03,7],login1`` → ``[node01, node02, node03, node7, login1]`` (SLURM's compressed host list)."""
    hosts: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if not m:
            hosts.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for item in ranges.split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ConfigError(f'SLURM_JOB_NODELIST "{text}" has a range "{item}" that is not numeric')
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{n:0{len(lo)}d}{suffix}")
    return hosts


def slurm_defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    """nnodes / node_rank / master for this node, or {} outside a multi-node SLURM allocation."""
    nnodes = environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES")
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nnodes or not nodelist or int(nnodes) <= 1:
        return {}
    hosts = expand_hostlist(nodelist)
    if len(hosts) != int(nnodes):
        raise ConfigError(f"SLURM says {nnodes} nodes but SLURM_JOB_NODELIST names {len(hosts)}",
                          hint="pass --nnodes, --node-rank and --master yourself")
    port = BASE_PORT + int(environ.get("SLURM_JOB_ID", "0")) % 1000
    return {"nnodes": int(nnodes), "node_rank": int(environ.get("SLURM_NODEID", "0")), "master": f"{hosts[0]}:{port}"}


class Slurm:
    name = "slurm"

    def detect(self, environ: Mapping[str, str]) -> bool:
        return "SLURM_JOB_ID" in environ or "SLURM_NNODES" in environ

    def defaults(self, environ: Mapping[str, str]) -> dict[str, Any]:
        return slurm_defaults(environ)


ENVIRONMENT = Slurm()
