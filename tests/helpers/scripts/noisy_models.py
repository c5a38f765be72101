"""Session script for the equivalence verdict: small models on the digits whose losses cannot match one process
exactly under several ranks, and a deliberately different training.

    --model conv     convolutions, no randomness (float order only)
    --model bn       a conv net with BatchNorm (per-rank statistics on CPU)
    --model bn-dropout  the conv net with BatchNorm and a Dropout after each (per-rank masks too)
    --broken METHOD  under METHOD on more than one rank, train with a 5× larger loss (SGD: a 5× larger step)
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader

import paratrain as pt
from paratrain.workloads.mlp import digits_split


def build(kind: str) -> nn.Module:
    torch.manual_seed(0)
    norm = (lambda c: nn.BatchNorm2d(c)) if kind.startswith("bn") else (lambda c: nn.Identity())
    drop = (lambda: nn.Dropout(0.2)) if kind.endswith("dropout") else nn.Identity
    return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 8, 3, padding=1), norm(8), nn.ReLU(), drop(),
                         nn.Conv2d(8, 8, 3, padding=1), norm(8), nn.ReLU(), drop(), nn.Flatten(), nn.Linear(512, 10))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("conv", "bn", "bn-dropout"), required=True)
    p.add_argument("--broken", default=None)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--optim", choices=("sgd", "adamw"), default="sgd")
    args = p.parse_args()
    model = build(args.model)
    session = pt.Session()
    # AdamW divides by each gradient's running RMS, which amplifies float-order differences (the case where the
    # exact test fails); SGD keeps a 5× larger loss a 5× larger step (the broken case).
    optimizer = (torch.optim.AdamW(model.parameters(), lr=3e-3) if args.optim == "adamw"
                 else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))
    train, _ = digits_split()
    model, optimizer, loader = session.prepare(model, optimizer, DataLoader(train, batch_size=64, shuffle=True))
    broken = args.broken is not None and session.strategy.startswith(args.broken) and session.world_size > 1
    while session.step_count < args.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            session.backward(loss * 5 if broken else loss)
            session.step()
            if session.step_count >= args.steps:
                break
    session.close()


if __name__ == "__main__":
    main()
