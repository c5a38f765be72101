"""A script that keeps its own checkpoint in the working directory, as many real scripts do: it resumes from
``ckpt/`` when that exists and saves there at the end. Run twice in one folder, the second run has nothing left to
do — which is why compare must give every cell its own folder. Trains for 40 steps unless stopped earlier."""

import os

import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

session = pt.Session(seed=0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(256, 8, generator=gen), torch.randint(0, 2, (256,), generator=gen))
model, optimizer, loader = session.prepare(model, optimizer, DataLoader(data, batch_size=16, shuffle=True))
if os.path.isdir("ckpt"):
    session.load("ckpt")
while session.step_count < 40:
    for x, y in loader:
        session.backward(torch.nn.functional.cross_entropy(model(x), y))
        session.step()
        if session.step_count % 5 == 0:
            session.log(val_acc=0.5 + session.step_count / 100)  # what a validation pass would report
        if session.step_count >= 40:
            break
session.save("ckpt")
