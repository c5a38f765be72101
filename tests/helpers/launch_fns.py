"""Functions for `paratrain.launch` tests: top level in an importable module, as spawned workers need."""

from __future__ import annotations

import torch


def train(session, steps: int) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, _ = session.prepare(model, optimizer)
    loss = torch.zeros(())
    for _ in range(steps):
        loss = model(torch.ones(8, 4)).pow(2).mean()
        session.backward(loss)
        session.step()
    return {"rank": session.rank, "world": session.world_size, "strategy": session.strategy,
            "loss": float(session.all_reduce(loss.detach())), "options": session.options.to_json()}


def fail_on_rank_one(session) -> int:
    if session.rank == 1:
        raise ValueError("rank one cannot go on")
    session.barrier()
    return 1
