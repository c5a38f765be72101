"""Cluster environments: where a multi-node launch learns its node count, node rank and master from the scheduler
that started it, so ``paratrain run`` needs no flags there.

One small interface (:class:`ClusterEnvironment`) and a registry of implementations, each a module of its own: SLURM
(``launcher/slurm.py``) and Kubeflow's PyTorch runtime (``launcher/kubeflow.py``) today; LSF or MPI would be one
more module and one line in :data:`ENVIRONMENTS`. What an environment gives is a default: ``paratrain.toml`` and
the flags still win.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol


class ClusterEnvironment(Protocol):
    name: str  # what `paratrain run --dry-run` says the defaults came from

    def detect(self, environ: Mapping[str, str]) -> bool:
        """Was this process started by this scheduler?"""

    def defaults(self, environ: Mapping[str, str]) -> dict[str, Any]:
        """RunConfig values for this node (``nnodes``, ``node_rank``, ``master``, ``nproc``): only those the
        scheduler decides; {} where it decides nothing (a one-node allocation)."""


# name -> "module:attribute", imported when asked: the first that detects its scheduler is used.
ENVIRONMENTS: dict[str, str] = {
    "slurm": "paratrain.launcher.slurm:ENVIRONMENT",
    "kubeflow": "paratrain.launcher.kubeflow:ENVIRONMENT",
}


def _load(target: str) -> ClusterEnvironment:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def detect(environ: Mapping[str, str]) -> ClusterEnvironment | None:
    return next((env for env in map(_load, ENVIRONMENTS.values()) if env.detect(environ)), None)


def defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    """The defaults of the scheduler that started this process, or {} outside any."""
    found = detect(environ)
    return found.defaults(environ) if found is not None else {}
