"""A Session script whose training options all come from the launcher (flags or paratrain.toml).

The model is built *after* the Session without seeding it here, so --seed decides its initial weights; the loader
shuffles, so --seed decides the data order too. Writes losses, the pre-clip global gradient norms, the final
weights and (optionally) a checkpoint to OUT (main rank).

    paratrain run -s ddp -n 2 --precision bf16-mixed --grad-clip 0.5 --seed 3 options_train.py OUT [STEPS]

It trains with ``session.train_step``; ``--explicit`` trains with ``model(x)``, ``session.backward``, ``session.step``.
"""

import json
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt


def main() -> None:
    out, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    explicit = "--explicit" in sys.argv
    session = pt.Session()
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(256, 16, generator=gen)
    y = (x @ torch.randn(16, 4, generator=gen)).argmax(dim=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model, optimizer, loader = session.prepare(model, optimizer, loader)
    losses, norms = [], []
    while session.step_count < steps:
        for xb, yb in loader:
            if explicit:  # the loop every method but pp runs
                loss = nn.functional.cross_entropy(model(xb), yb)
                session.backward(loss)
                session.step()
            else:
                loss = session.train_step(xb, yb, nn.functional.cross_entropy)
            losses.append(float(session.all_reduce(loss.detach(), op="mean")))
            norms.append(session.grad_norm)
            if session.step_count >= steps:
                break
    state = session.model_state_dict()
    if session.is_main:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "losses.json"), "w") as fh:
            json.dump({"losses": losses, "norms": norms, "options": session.options.to_json(),
                       "dtype": str(next(iter(state.values())).dtype)}, fh)
        torch.save({k: v.detach().float().cpu().clone() for k, v in state.items()}, os.path.join(out, "weights.pt"))
    session.close()


if __name__ == "__main__":
    main()
