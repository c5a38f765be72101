"""FSDP + tensor parallel on a 2-D mesh: tensor parallel inside each group of ``tp`` ranks, FSDP across the groups.

The ranks form a (dp, tp) grid. Each row of ``tp`` ranks holds one replica split by the model's plan
(:mod:`paratrain.strategies.tp`); FSDP2 then shards every block's slices (and the replicated layers) across the
``dp`` rows, as torchtitan trains Llama 3.1 405B. The rows are the data-parallel replicas: each reads its own share of
the batch, and the Session's reductions go over them. Put the ``tp`` ranks of a row on one machine (torchrun's
consecutive ranks are): they all-reduce every block's output.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from paratrain.blocks import transformer_blocks
from paratrain.errors import ConfigError
from paratrain.strategies import _procgroup
from paratrain.strategies.base import Availability, BackwardSyncControl, Method, Strategy, StrategyOptions
from paratrain.strategies.fsdp import rebind_optimizer
from paratrain.strategies.tp import TensorParallelStrategy, split


@dataclass(frozen=True, kw_only=True)
class FSDPTPOptions(StrategyOptions):
    tp: int | None = None  # ranks per tensor-parallel group (default: 2 where the processes pair up, else 1)

    shorthands: ClassVar[Mapping[str, Mapping[str, Any]]] = {}


class FSDPTPStrategy(Strategy, BackwardSyncControl):
    method = Method.FSDP_TP
    options_type = FSDPTPOptions
    options: FSDPTPOptions
    supported_precision = TensorParallelStrategy.supported_precision
    compilable = False
    _mesh: Any = None

    @classmethod
    def available(cls) -> Availability:
        return TensorParallelStrategy.available()

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        tp = self._tp
        if tp < 1 or self.world_size % tp:
            raise ConfigError(f"fsdp+tp:tp={tp} needs a number of processes that is a multiple of {tp} "
                              f"({self.world_size} given)", hint=f"use --nproc {2 * tp}, or another tp=")
        self.device = _procgroup.join(self.env, str(self.method))
        self._mesh = init_device_mesh(self.device.type, (self.world_size // tp, tp), mesh_dim_names=("dp", "tp"))

    @property
    def _tp(self) -> int:
        if self.options.tp is not None:
            return self.options.tp
        return 2 if self.world_size % 2 == 0 else 1

    @property
    def data_parallel_rank(self) -> int:
        return self._mesh["dp"].get_local_rank()

    @property
    def data_parallel_size(self) -> int:
        return self.world_size // self._tp

    @property
    def data_parallel_group(self) -> Any:
        return self._mesh["dp"].get_group()

    def wrap(self, model, optimizer):
        from torch.distributed.fsdp import fully_shard

        names = split(model, self._mesh["tp"], self.device)
        dp_mesh = self._mesh["dp"]
        for block in transformer_blocks(model):
            fully_shard(block, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
        if optimizer is not None:
            rebind_optimizer(optimizer, names, dict(model.named_parameters()))
        return model, optimizer

    def full_model_state_dict(self, model: torch.nn.Module) -> dict[str, torch.Tensor]:
        """The base's gather, without DTensor's note that unsharding a 2-D placement takes "2 sequential all_gather
        operations" on every rank: true, harmless for a whole-model copy taken once, and the result is exact."""
        import logging

        quiet = logging.getLogger("torch.distributed.tensor._redistribute")
        level = quiet.level
        quiet.setLevel(logging.ERROR)
        try:
            return super().full_model_state_dict(model)
        finally:
            quiet.setLevel(level)

    def set_grad_sync(self, model, enabled: bool) -> None:
        model.set_requires_gradient_sync(enabled)

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)
