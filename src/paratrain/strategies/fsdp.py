"""FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded across ranks.

Each block of an ``nn.ModuleList`` (the transformer convention) becomes its own FSDP unit, then the root, so only
one block is unsharded at a time. ``shard=grad_op`` keeps parameters gathered between forward and backward
(ZeRO-2-like), ``shard=none`` replicates (DDP-like, through a 2-D mesh whose shard dimension is 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.distributed as dist

from paratrain.blocks import transformer_blocks
from paratrain.errors import ConfigError
from paratrain.precision import sharded_policy
from paratrain.strategies import _procgroup
from paratrain.strategies.base import Availability, BackwardSyncControl, Method, Strategy, StrategyOptions


@dataclass(frozen=True, kw_only=True)
class FSDPOptions(StrategyOptions):
    shard: Literal["full", "grad_op", "none"] = "full"
    offload: Literal["none", "cpu"] = "none"
    # bf16-mixed: 16-bit parameters gathered (the default) or fp32 shards gathered under autocast (paratrain.precision)
    mixed: Literal["params", "autocast"] = "params"

    shorthands: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "full": {"shard": "full"},
        "grad_op": {"shard": "grad_op"},
        "offload": {"offload": "cpu"},
    }
    # Mixed precision is a training option for every method now: one way to say it.
    moved: ClassVar[Mapping[str, str]] = {"mixed_precision": "--precision bf16-mixed", "bf16": "--precision bf16-mixed",
                                          "fp16": "--precision bf16-mixed"}


class FSDPStrategy(Strategy, BackwardSyncControl):
    method = Method.FSDP
    builds = "fsdp"  # fully_shard or FullyShardedDataParallel, the Session's or the script's own
    options_type = FSDPOptions
    options: FSDPOptions
    # bf16-mixed is FSDP2's MixedPrecisionPolicy (bf16 parameters gathered, fp32 shards and gradient reduction;
    # precision.sharded_policy), inside the Session's autocast; mixed=autocast gathers the fp32 shards instead.
    # fp16 would need a sharded gradient scaler, which this version does not provide.
    supported_precision = frozenset({"fp32", "bf16-mixed", "bf16-true"})

    @classmethod
    def available(cls) -> Availability:
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError:
            return Availability(False, f"torch {torch.__version__} has no FSDP2 fully_shard",
                                'pip install "torch>=2.6"')
        if not dist.is_available():
            return Availability(False, "this torch build has no torch.distributed", "pip install torch")
        return Availability.yes("FSDP2 on " + ("GPU" if torch.cuda.is_available() else "CPU (gloo)"))

    def setup(self) -> None:
        self.device = _procgroup.join(self.env, str(self.method))
        opts = self.options
        if opts.offload == "cpu" and self.device.type != "cuda":
            raise ConfigError("fsdp offload=cpu needs a GPU (parameters already live on the CPU here)",
                              hint="drop offload=cpu on a CPU-only machine")

    def _mesh(self):
        from torch.distributed.device_mesh import init_device_mesh

        world = dist.get_world_size()
        assert self.device is not None  # set by setup()
        if self.options.shard == "none":
            return init_device_mesh(self.device.type, (world, 1), mesh_dim_names=("replicate", "shard"))
        return init_device_mesh(self.device.type, (world,))

    def init_context(self):
        return self.deferred_shapes()  # wrap() shards, then fills each rank's shard from rank 0

    @property
    def frees_parameters_after_forward(self) -> bool:
        return self.options.shard == "full"

    def wrap(self, model, optimizer):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

        # The whole model never goes to the device: fully_shard moves one unit at a time and keeps only this
        # rank's shard there. Each rank's shard comes from its own initial values, so rank 0's (kept on the
        # CPU) are broadcast into the shards afterwards, as DDP does at construction.
        # No copy: fully_shard gives each parameter new storage for its shard, so the user's full tensors are
        # untouched, and held here alone until they are broadcast (rank 0 then holds the model once, not twice).
        initial = {k: v.detach().to("cpu") for k, v in model.state_dict().items()} if self.rank == 0 else {}
        names = {id(p): n for n, p in model.named_parameters()}
        kwargs = {"mesh": self._mesh(), "reshard_after_forward": self.frees_parameters_after_forward}
        if self.options.offload == "cpu":
            kwargs["offload_policy"] = CPUOffloadPolicy()
        if (policy := sharded_policy(model, self.precision, self.options.mixed)) is not None:
            kwargs["mp_policy"] = policy
        blocks = transformer_blocks(model)
        for block in blocks:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
        if self._deferred and self.rank != 0:
            model.to_empty(device=self.device)  # this rank's shards only, uninitialised until the broadcast below
        # Unit by unit (each block, then the rest): rank 0 lets go of each unit's full tensors once they are sent
        # (the other ranks receive one tensor at a time either way).
        module_names = {id(m): n for n, m in model.named_modules()}
        full = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=False)
        for block in blocks:
            prefix = module_names[id(block)] + "."
            part = {k[len(prefix):]: initial.pop(k) for k in [k for k in initial if k.startswith(prefix)]}
            set_model_state_dict(block, part, options=full)
        set_model_state_dict(model, initial, options=full)
        if self._deferred:  # buffers outside the state dict (persistent=False: rotary tables, masks) are rank 0's too
            for buffer in model.buffers():
                dist.broadcast(buffer, src=0)
        if optimizer is not None:
            rebind_optimizer(optimizer, names, dict(model.named_parameters()))
        return model, optimizer

    def set_grad_sync(self, model, enabled: bool) -> None:
        model.set_requires_gradient_sync(enabled)

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)


def rebind_optimizer(optimizer: torch.optim.Optimizer, old_names: dict[int, str], new_params: dict) -> None:
    """fully_shard replaces each parameter with a sharded one; point the user's optimizer at the new ones.

    Keeping the same optimizer object (rather than building a new one) keeps any scheduler bound to it working.
    """
    if optimizer.state:
        raise ConfigError("the optimizer has already taken steps; FSDP must wrap it before training",
                          hint="call session.prepare() before the first optimizer.step()")
    for group in optimizer.param_groups:
        group["params"] = [new_params[old_names[id(p)]] for p in group["params"]]
