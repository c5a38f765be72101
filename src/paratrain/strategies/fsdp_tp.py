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
from paratrain.precision import sharded_policy
from paratrain.strategies import _procgroup
from paratrain.strategies.base import Availability, BackwardSyncControl, Method, Strategy, StrategyOptions
from paratrain.strategies.fsdp import rebind_optimizer
from paratrain.strategies.tp import TensorParallelStrategy, split


def _own_outputs(_module: torch.nn.Module, _inputs: Any, output: Any) -> Any:
    """An FSDP unit's outputs that tensor parallelism handed back as views, as tensors of their own.

    The split turns a DTensor back into a plain tensor with ``DTensor.to_local()`` (the replicated head's output,
    a row-wise layer's), and torch makes that a view of the DTensor's local tensor (``view_as``). FSDP2 registers its
    pre-backward hook on each unit's outputs, and on a view an in-place op by the script (``out += bias``) would drop
    that hook and skip the all-gather before backward — which torch warns about on every rank, every step ("… will
    silently drop the pre-backward hook …"). A copy of the output (the model's logits, once per forward; the view's
    base is freed right after, so the step's peak does not grow) removes the hazard and the warning; a view the
    script's own forward returns is left alone, so its warning still points at the script.
    """
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, _own_tensor, output)


def _own_tensor(tensor: torch.Tensor) -> torch.Tensor:
    made_by_to_local = type(tensor.grad_fn).__name__ == "_ToTorchTensorBackward"  # DTensor.to_local's autograd node
    return tensor.clone() if tensor._base is not None and made_by_to_local else tensor


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
        kwargs: dict[str, Any] = {"mesh": dp_mesh}
        if (policy := sharded_policy(model, self.precision)) is not None:  # bf16 slices gathered, fp32 reduction
            kwargs["mp_policy"] = policy
        for unit in [*transformer_blocks(model), model]:
            unit.register_forward_hook(_own_outputs, prepend=True)  # before FSDP's own post-forward hook
            fully_shard(unit, **kwargs)
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
