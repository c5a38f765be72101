"""Deferred initialisation under DeepSpeed ZeRO-3: rank 0's model, partitioned one module at a time.

``Session.init_module()`` builds the model for real on rank 0 and as shapes on the meta device elsewhere, as under
fsdp. Here each module, children first, gets memory for its own tensors on the other ranks, then is handed to
``deepspeed.zero.Init(module=...)``, which broadcasts rank 0's values and keeps each rank's partition — so a rank
other than 0 holds its partitions plus one module's tensors at a time, never the whole model.

Why not build inside ``zero.Init`` directly: it partitions each module as soon as that module is built, so an
initialisation a parent's ``__init__`` applies to a child's parameters afterwards (``nn.MultiheadAttention`` zeroes
its output projection's bias; GPT-style ``self.apply(init_weights)``) lands on empty partitions and silently does
nothing — the trained model would start from other weights than one process's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _weights_dtype(config: dict[str, Any]) -> torch.dtype | None:
    """The dtype DeepSpeed's engine casts the weights to (its ``bf16``/``fp16`` sections), or None: fp32."""
    for section, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        if (config.get(section) or {}).get("enabled"):
            return dtype
    return None


def partition_from_rank0(model: torch.nn.Module, config: dict[str, Any]) -> None:
    """Partition ``model`` module by module from rank 0's values. Under DeepSpeed's 16-bit weight modes each
    module's parameters are cast before they are partitioned, as the engine casts a model it partitions itself:
    ``zero.Init`` keeps the dtype it is handed and the engine casts no model already partitioned, so without the cast
    ZeRO-3 would hold and gather fp32 weights where ZeRO-1/2 hold bf16 ones."""
    import deepspeed

    dtype = _weights_dtype(config)
    for module in reversed(list(model.modules())):  # children before their parents
        for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if tensor.is_meta:  # a rank other than 0: this module's tensors, uninitialised until the broadcast
                # in place, so that a tied weight stays one parameter (to_empty would give each module its own)
                empty = torch.empty_like(tensor, device="cpu")
                torch.utils.swap_tensors(tensor, torch.nn.Parameter(empty, tensor.requires_grad)
                                         if isinstance(tensor, torch.nn.Parameter) else empty)
        if dtype is not None:  # in place (a tied weight stays one parameter); one already partitioned is skipped
            for param in module.parameters(recurse=False):
                if param.is_floating_point() and not hasattr(param, "ds_id"):
                    param.data = param.data.to(dtype)
        if any(True for _ in module.parameters(recurse=False)):
            # mem_efficient_linear=False: with a module given, DeepSpeed would patch F.linear and never restore it
            deepspeed.zero.Init(module=module, config_dict_or_path=config, mem_efficient_linear=False)
    for buffer in model.buffers():  # buffers are not partitioned: every rank gets rank 0's
        dist.broadcast(buffer, src=0)
