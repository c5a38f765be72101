"""Defaults for a multi-node launch started by Kubeflow's PyTorch runtime (TrainJob / PyTorchJob).

Kubeflow starts one pod per node and gives each the torchrun conventions as ``PET_*`` variables: ``PET_NNODES``
(→ ``--nnodes``), ``PET_NODE_RANK`` (→ ``--node-rank``), ``PET_MASTER_ADDR``/``PET_MASTER_PORT`` (→ ``--master``)
and ``PET_NPROC_PER_NODE`` (→ ``--nproc``, when it is a number rather than ``auto``/``gpu``). So the pod's command
can be ``paratrain run -s fsdp train.py``. Flags and ``paratrain.toml`` still win.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paratrain.errors import ConfigError

DEFAULT_PORT = 29500


def _int(environ: Mapping[str, str], key: str) -> int:
    text = environ[key]
    if not text.strip().isdigit():
        raise ConfigError(f'{key}="{text}" is not a number', hint="pass --nnodes, --node-rank and --master yourself")
    return int(text)


class Kubeflow:
    name = "kubeflow"

    def detect(self, environ: Mapping[str, str]) -> bool:
        return all(key in environ for key in ("PET_NNODES", "PET_NODE_RANK", "PET_MASTER_ADDR"))

    def defaults(self, environ: Mapping[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        nproc = environ.get("PET_NPROC_PER_NODE", "")
        if nproc.isdigit() and int(nproc) > 0:
            out["nproc"] = int(nproc)
        nnodes = _int(environ, "PET_NNODES")
        if nnodes > 1:
            port = environ.get("PET_MASTER_PORT") or str(DEFAULT_PORT)
            out.update(nnodes=nnodes, node_rank=_int(environ, "PET_NODE_RANK"),
                       master=f"{environ['PET_MASTER_ADDR']}:{port}")
        return out


ENVIRONMENT = Kubeflow()
