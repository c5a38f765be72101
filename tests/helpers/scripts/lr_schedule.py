"""A Session script with an LR scheduler built on the user's optimizer before prepare() (the usual order): rank 0
writes the learning rate of every step and the losses, so a method's schedule can be compared with one process's."""

import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

out, steps = sys.argv[1], 6
session = pt.Session()
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
model, optimizer, loader, scheduler = session.prepare(model, optimizer, DataLoader(data, batch_size=8), scheduler)
lrs, losses = [], []
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    session.backward(loss)
    lrs.append(optimizer.param_groups[0]["lr"])  # the rate this step trains with
    session.step()
    losses.append(float(session.all_reduce(loss.detach(), op="mean")))
    if session.step_count >= steps:
        break
if session.is_main:
    with open(out, "w") as fh:
        json.dump({"lrs": lrs, "last_lr": scheduler.get_last_lr(), "losses": losses}, fh)
