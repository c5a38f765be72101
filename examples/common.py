"""The workload shared by the hand-written examples and the Session example.

Kept free of paratrain on purpose: the hand-written scripts are the baselines paratrain is measured against.
A small deterministic MLP classifier on synthetic data (no downloads, no dropout), so that every method can be
checked to produce the same numbers.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from torch import nn
from torch.utils.data import TensorDataset

IN_FEATURES, HIDDEN, CLASSES = 16, 64, 4


def build_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
        nn.Linear(HIDDEN, CLASSES),
    )


def make_dataset(n: int = 512, seed: int = 1234) -> TensorDataset:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN_FEATURES, generator=gen)
    teacher = torch.randn(IN_FEATURES, CLASSES, generator=gen)
    y = (x @ teacher + 0.5 * torch.randn(n, CLASSES, generator=gen)).argmax(dim=1)
    return TensorDataset(x, y)


def make_optimizer(name: str, params, lr: float | None = None) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.05, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr or 1e-3, weight_decay=0.01)
    raise SystemExit(f"unknown optimizer {name!r}: use sgd or adamw")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=100, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=32, help="global batch size")
    p.add_argument("--samples", type=int, default=512, help="dataset size")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--out", default=None, help="directory for losses.json and weights.pt (main rank)")
    return p.parse_known_args(argv)[0]


def write_results(out: str | None, losses: list[float], state: dict[str, torch.Tensor], **extra) -> None:
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "losses.json"), "w") as fh:
        json.dump({"losses": losses, **extra}, fh)
    torch.save({k: v.detach().cpu().clone() for k, v in state.items()}, os.path.join(out, "weights.pt"))


def leave_process_group(ok: bool) -> None:
    """Leave the default process group the way that does not abort at exit.

    With gloo (torch 2.x on CPU), a rank that destroys its group while a peer still uses its end, or that reaches
    interpreter exit with the group's threads still busy, can die with "terminate called without an active
    exception" after its work is done. A monitored barrier first (so every rank is finished), then destroy. After an
    error there is no barrier: the other ranks may be waiting for this one.
    """
    import datetime

    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if ok:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
        else:
            dist.barrier()
    dist.destroy_process_group()
