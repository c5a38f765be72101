"""Tensor parallelism, Megatron-LM's split on PyTorch's DTensor: the ranks hold slices of every transformer block's
matrices and compute each block together, on the same batch (they are one replica: data-parallel size 1).

What is split comes from a plan, module-name patterns → "colwise" or "rowwise", as Hugging Face configs write it
(``base_model_tp_plan``). A column-wise Linear keeps some of its outputs on each rank (some attention heads, some MLP
units); the row-wise Linear after it takes those slices in and all-reduces its output, so a block costs one
all-reduce of its activations for attention and one for the MLP, forward and backward. Everything outside the plan
(embeddings, norms, the output head) is replicated: whole on every rank, as replicated DTensors, so every parameter is
a DTensor and torch's ``clip_grad_norm_`` and foreach optimizers see one kind of tensor.

Where the plan comes from (first found): a Hugging Face model's ``config.base_model_tp_plan`` (Llama, Mistral, Qwen
and the other decoders that ship one), then ``model.tp_plan`` (the bundled gpt declares one; a user sets theirs
before ``prepare()``). A model with neither is refused by name. A split must not cut an attention head in two: the
number of heads (key/value heads under grouped-query attention) must divide by the number of ranks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from paratrain.errors import ConfigError
from paratrain.strategies import _procgroup
from paratrain.strategies._one_replica import OneReplica
from paratrain.strategies.base import Availability, Method, Strategy
from paratrain.strategies.fsdp import rebind_optimizer

STYLES = ("colwise", "rowwise")
PLAN_HINT = ('set model.tp_plan = {"blocks.*.attn.qkv": "colwise", "blocks.*.attn.out": "rowwise", ...} before '
             "session.prepare() (docs/tensor-parallel.md), or use --strategy fsdp")


def find_plan(model: nn.Module) -> dict[str, str]:
    """The model's plan as full module names → style; a one-line ConfigError when it has none or it is unusable."""
    # A transformers model's config plan first: the model's own ``tp_plan`` adds styles beyond these two
    # (a vocabulary-split embedding and output head), which stay whole here.
    prefix, patterns = "", getattr(getattr(model, "config", None), "base_model_tp_plan", None)
    if patterns:
        base = getattr(model, "base_model", model)
        prefix = next((f"{name}." for name, m in model.named_modules() if m is base and name), "")
    else:
        patterns = getattr(model, "tp_plan", None)
    if not patterns:
        raise ConfigError(f"--strategy tp cannot split {type(model).__name__}: it declares no tensor-parallel plan",
                          hint=PLAN_HINT)
    names = dict(model.named_modules())
    plan: dict[str, str] = {}
    for pattern, style in dict(patterns).items():
        if style not in STYLES:
            raise ConfigError(f'tensor-parallel plan entry "{pattern}": "{style}" is not one of {", ".join(STYLES)}',
                              hint=PLAN_HINT)
        regex = re.compile(re.escape(prefix + pattern).replace(r"\*", r"[^.]+") + "$")
        matched = [n for n in names if regex.match(n)]
        for name in matched:
            if not isinstance(names[name], nn.Linear):
                raise ConfigError(f"tensor-parallel plan entry {pattern} matches {name}, a "
                                  f"{type(names[name]).__name__}: only nn.Linear layers are split", hint=PLAN_HINT)
            plan[name] = style
    if not plan:
        raise ConfigError(f"the tensor-parallel plan of {type(model).__name__} matches none of its modules",
                          hint=PLAN_HINT)
    return plan


def check_divides(model: nn.Module, plan: Mapping[str, str], ranks: int) -> None:
    """Every split is even and no attention head is cut: DTensor would shard unevenly and train a different model."""
    config = getattr(model, "config", None)
    heads = {"attention heads": getattr(config, "num_attention_heads", None) or getattr(model, "heads", None),
             "key/value heads": getattr(config, "num_key_value_heads", None)}
    for what, count in heads.items():
        if count and count % ranks:
            raise ConfigError(f"--strategy tp over {ranks} ranks would cut attention heads apart: "
                              f"{type(model).__name__} has {count} {what}",
                              hint=f"use a number of processes that divides {count}")
    modules = dict(model.named_modules())
    for name, style in plan.items():
        layer = modules[name]
        size = layer.out_features if style == "colwise" else layer.in_features
        if size % ranks:
            raise ConfigError(f"--strategy tp over {ranks} ranks cannot split {name} evenly ({style}, {size} features)",
                              hint=f"use a number of processes that divides {size}")


def tied_parameters(model: nn.Module) -> list[list[str]]:
    """The names of each parameter that several modules share (an output head tied to the input embedding)."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return [group for group in names.values() if len(group) > 1]


def check_ties(model: nn.Module, plan: Mapping[str, str]) -> None:
    """A tied weight stays one parameter where every module sharing it is replicated; one the plan would split is
    refused by name — each layer would otherwise hold its own copy and train a different model, with no word."""
    for group in tied_parameters(model):
        split_here = [n for n in group if n.rpartition(".")[0] in plan]
        if split_here:
            raise ConfigError(f"--strategy tp cannot split {split_here[0]}: it is tied to "
                              f"{', '.join(n for n in group if n != split_here[0])}, and the plan splits "
                              f"{' and '.join(n.rpartition('.')[0] for n in split_here)}",
                              hint="leave the tied layers out of the plan (they are then kept whole and tied), "
                                   "or untie them")


def _replicated_inputs(module: nn.Module, inputs: tuple, mesh: Any) -> tuple:
    from torch.distributed.tensor import DTensor, Replicate

    return tuple(DTensor.from_local(x, mesh, [Replicate()], run_check=False)
                 if isinstance(x, torch.Tensor) and not isinstance(x, DTensor) else x for x in inputs)


def _local_output(module: nn.Module, output: Any, mesh: Any) -> Any:
    from torch.distributed.tensor import DTensor

    return output.to_local() if isinstance(output, DTensor) else output


def replicate_the_rest(model: nn.Module, mesh: Any) -> None:
    """Every module that owns parameters outside the plan holds them as replicated DTensors; its tensor inputs become
    replicated DTensors on the way in and its outputs plain tensors on the way out (the same on every rank)."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_module

    made: dict[int, nn.Parameter] = {}  # id of a parameter → its replicated DTensor: a tied weight stays one

    for module in list(model.modules()):
        own = list(module.named_parameters(recurse=False))
        if not own or any(isinstance(p, DTensor) for _, p in own):
            continue

        def partition(_name: str, sub: nn.Module, device_mesh: Any, target: nn.Module = module) -> None:
            if sub is target:  # its own parameters only: its children are handled on their own
                for key, param in list(sub.named_parameters(recurse=False)):
                    if id(param) not in made:
                        value = DTensor.from_local(param.data, device_mesh, [Replicate()], run_check=False)
                        made[id(param)] = nn.Parameter(value, requires_grad=param.requires_grad)
                    sub.register_parameter(key, made[id(param)])

        distribute_module(module, mesh, partition, input_fn=_replicated_inputs,  # type: ignore[arg-type]
                          output_fn=_local_output)


def split(model: nn.Module, mesh: Any, device: Any) -> dict[int, str]:
    """Split ``model`` in place over the 1-D ``mesh`` by its plan, starting from rank 0's values (as DDP starts), the
    rest replicated; returns the name of each original parameter by its id, for the optimizer to follow."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    plan = find_plan(model)
    check_divides(model, plan, mesh.size())
    check_ties(model, plan)
    names = {id(p): n for n, p in model.named_parameters()}
    model.to(device)
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)  # every rank slices the same start
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    parallelize_module(model, mesh, {name: styles[style]() for name, style in plan.items()})
    replicate_the_rest(model, mesh)
    return names


class TensorParallelStrategy(OneReplica, Strategy):
    method = Method.TP
    supported_precision = frozenset({"fp32", "bf16-mixed"})
    compilable = False
    _mesh: Any = None

    @classmethod
    def available(cls) -> Availability:
        try:
            from torch.distributed.tensor.parallel import parallelize_module  # noqa: F401
        except ImportError:
            return Availability(False, f"torch {torch.__version__} has no torch.distributed.tensor.parallel",
                                'pip install "torch>=2.4"')
        if not dist.is_available():
            return Availability(False, "this torch build has no torch.distributed", "pip install torch")
        return Availability.yes("DTensor tensor parallel on " + ("GPU" if torch.cuda.is_available() else "CPU (gloo)"))

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        self.device = _procgroup.join(self.env, str(self.method))
        self._mesh = init_device_mesh(self.device.type, (dist.get_world_size(),), mesh_dim_names=("tp",))
        self.join_one_replica()  # one replica over all ranks: each reads the whole batch

    def wrap(self, model, optimizer):
        names = split(model, self._mesh, self.device)
        if optimizer is not None:
            rebind_optimizer(optimizer, names, dict(model.named_parameters()))
        return model, optimizer

    def teardown(self) -> None:
        _procgroup.leave(self.env.timeout_s)
