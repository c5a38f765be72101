"""DeepSpeed engine state in paratrain's terms: bytes held per rank, and full, name-keyed checkpoints.

Why: ZeRO keeps what matters outside ``model.parameters()`` — fp32 master partitions, the optimizer's state over flat
partitions, flat gradient buffers — so counting parameters + ``optimizer.state`` would miss exactly the memory
DeepSpeed is chosen for; and its partitions are flat, so a checkpoint must be reassembled per parameter (DeepSpeed's
``safe_get_full_*`` / ``safe_set_full_*`` API) before another method or world size can read it.
"""

from __future__ import annotations

from typing import Any

import torch

WALK_DEPTH = 3


def _storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    if t.device.type == "meta" or t.numel() == 0:
        return None
    storage = t.untyped_storage()
    return (storage.data_ptr(), storage.nbytes()) if storage.data_ptr() else None


def storages(module: torch.nn.Module, optimizer: Any) -> dict[tuple[int, int], str]:
    """Every distinct storage this rank holds for the model, by kind: parameters (a ZeRO-3 rank's own partitions),
    gradients (the engine's flat buffers included) and optimizer state (fp32 master partitions included)."""
    seen: dict[tuple[int, int], str] = {}

    def add(t: Any, kind: str) -> None:
        if isinstance(t, torch.Tensor) and (key := _storage_key(t)) and key not in seen:
            seen[key] = kind

    for p in module.parameters():
        add(getattr(p, "ds_tensor", None) if hasattr(p, "ds_id") else p, "params")
        if getattr(p, "ds_persist", False):  # ZeRO-3 keeps small tensors whole on every rank too
            add(p.data, "params")
        add(p.grad, "grads")

    def walk(value: Any, kind: str, depth: int) -> None:
        if isinstance(value, torch.Tensor):
            add(value, kind)
        elif depth and isinstance(value, (list, tuple)):
            for v in value:
                walk(v, kind, depth - 1)
        elif depth and isinstance(value, dict):
            for k, v in value.items():
                walk(v, "grads" if "grad" in str(k) else kind, depth - 1)

    if optimizer is not None:
        for name, value in vars(optimizer).items():
            walk(value, "grads" if "grad" in name else "optimizer", WALK_DEPTH)
        inner = getattr(optimizer, "optimizer", optimizer)
        for per_param in inner.state.values():
            walk(per_param, "optimizer", 1)
        for group in inner.param_groups:  # the master copies the inner optimizer steps
            walk(group["params"], "optimizer", 1)
    return seen


def held_bytes(module: torch.nn.Module, optimizer: Any,
               earlier: dict[tuple[int, int], str] | None = None) -> dict[str, int]:
    """Bytes per kind over the storages held now and the gradients of ``earlier`` (the same step before the
    optimizer ran, when ZeRO-1/2 still hold them): the model state a rank needs across a step, as the ZeRO paper
    counts it. Only the gradients are taken from before: parameters and optimizer state are still held after the
    step, though perhaps re-allocated (ZeRO-3 re-gathers its persistent parameters), which would count them twice;
    and the kind is part of the key because a freed gradient buffer can hand its address to optimizer state."""
    grads = {(*key, kind) for key, kind in (earlier or {}).items() if kind == "grads"}
    seen = grads | {(*key, kind) for key, kind in storages(module, optimizer).items()}
    out = {"params": 0, "grads": 0, "optimizer": 0}
    for _, nbytes, kind in seen:
        out[kind] += nbytes
    out["total"] = sum(out.values())
    return out


def _shape(p: torch.nn.Parameter) -> torch.Size:
    return p.ds_shape if hasattr(p, "ds_shape") else p.shape


def full_model(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter (the fp32 master values) and buffer, unsharded, on every rank — a collective."""
    from deepspeed.utils import safe_get_full_fp32_param

    params = dict(module.named_parameters())
    out: dict[str, torch.Tensor] = {}
    for name, value in module.state_dict().items():
        if name in params:
            p = params[name]
            full = safe_get_full_fp32_param(p) if p.requires_grad else None
            out[name] = (full if full is not None else p.detach()).reshape(_shape(p)).cpu().clone()
        else:
            out[name] = value.detach().cpu().clone()
    return out


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    return getattr(optimizer, "optimizer", optimizer)


def _init_state(optimizer: Any) -> None:
    """Give the inner optimizer its state before the first step (a zero step at learning rate 0, as torch does for
    its own checkpoints): a checkpoint needs the tensors to save, or to load into."""
    inner = _inner(optimizer)
    if inner.state:
        return
    params = [p for g in inner.param_groups for p in g["params"]]
    lrs = [g.get("lr") for g in inner.param_groups]
    for p in params:
        p.grad = torch.zeros_like(p)
    for g in inner.param_groups:
        if "lr" in g:
            g["lr"] = 0.0
    inner.step()
    for g, lr in zip(inner.param_groups, lrs, strict=True):
        if lr is not None:
            g["lr"] = lr
    for p in params:
        p.grad = None
    if hasattr(optimizer, "_lazy_init_hp_params_optimizer_state"):  # ZeRO-1/2: link each parameter to its state
        optimizer._hp_optimizer_states_linked = False
        optimizer._lazy_init_hp_params_optimizer_state()


def clear_state(optimizer: Any) -> None:
    """Drop the step state; ZeRO-1/2 then links parameters to the new state after its next real step."""
    _inner(optimizer).state.clear()
    if hasattr(optimizer, "_hp_optimizer_states_linked"):
        optimizer._hp_optimizer_states_linked = False


def _optim_keys(optimizer: Any) -> tuple[list[str], torch.Tensor | None]:
    """The per-parameter state tensors (exp_avg, momentum_buffer, …) and the step counter, if any."""
    first: dict[str, Any] = next(iter(_inner(optimizer).state.values()), {})
    keys = [k for k, v in first.items() if isinstance(v, torch.Tensor) and k != "step" and v.dim() > 0]
    step = first.get("step")
    return keys, (step.detach().clone() if isinstance(step, torch.Tensor) else None)


def full_state(module: torch.nn.Module, optimizer: Any, names: list[list[str]]) -> dict[str, Any]:
    """``{"model": …, "optim": …}`` in the name-keyed layout torch's get_state_dict gives the other methods."""
    from deepspeed.utils import safe_get_full_optimizer_state

    out: dict[str, Any] = {"model": full_model(module), "optim": {}}
    if optimizer is None:
        return out
    _init_state(optimizer)
    params = dict(module.named_parameters())
    keys, step = _optim_keys(optimizer)
    state: dict[str, dict[str, torch.Tensor]] = {}
    for group in names:
        for name in group:
            p = params[name]
            entry = {k: safe_get_full_optimizer_state(p, k).reshape(_shape(p)).cpu().clone() for k in keys}
            if step is not None:
                entry["step"] = step.clone()
            state[name] = entry
    hyper = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    out["optim"] = {"state": state, "param_groups": [{**h, "params": list(n)} for h, n in zip(hyper, names,
                                                                                             strict=False)]}
    return out


def load_full_state(module: torch.nn.Module, optimizer: Any, names: list[list[str]], state: dict[str, Any]) -> None:
    """Put full, name-keyed tensors back into the engine: master partitions, the model's own (working) copies,
    buffers and optimizer state."""
    from deepspeed import zero
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

    params = dict(module.named_parameters())
    model_state = state["model"]
    for name, p in params.items():
        full = model_state[name].to(p.device)
        if p.requires_grad:
            safe_set_full_fp32_param(p, full.to(torch.float32))
        # GatheredParameters is a no-op below ZeRO-3, where every rank holds p whole already
        with zero.GatheredParameters([p], modifier_rank=0), torch.no_grad():
            p.data.copy_(full.to(p.dtype).reshape(p.data.shape))
    buffers = {k: v for k, v in model_state.items() if k not in params}
    if buffers:
        module.load_state_dict(buffers, strict=False)
    optim = state.get("optim") or {}
    if optimizer is None or not optim.get("state"):
        return
    _init_state(optimizer)
    steps = []
    for name, entry in optim["state"].items():
        p = params[name]
        for key, value in entry.items():
            if key == "step":
                steps.append(value)
            else:
                safe_set_full_optimizer_state(p, value.to(p.device, torch.float32).reshape(-1), key)
    if steps:
        for per_param in _inner(optimizer).state.values():
            if "step" in per_param:
                per_param["step"] = steps[0].clone().to(per_param["step"].device)
    for group, saved in zip(optimizer.param_groups, optim.get("param_groups") or [], strict=False):
        for key, value in saved.items():
            if key != "params" and key in group:
                group[key] = value
