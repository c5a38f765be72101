"""What one rank of a launched method reads and reduces: argv[1] is a folder where each rank writes rank<N>.json.

seen       the batches of one epoch of a prepared loader (12 samples, batch size 4, shuffled), training on each
evaluated  the batches of an evaluation loader over 5 samples (batch size 2)
gathered   session.gather(arange(3));  sum / mean: session.all_reduce of 1 and of the rank
"""
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

session = pt.Session()
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.arange(12.0)), batch_size=4, shuffle=True)
model, optimizer, loader = session.prepare(model, optimizer, loader)
seen = []
for (x,) in loader:
    seen.append(x.int().tolist())
    session.backward(model(x.unsqueeze(1)).pow(2).mean())
    session.step()
evaluated = [x.tolist() for (x,) in session.prepare_eval(DataLoader(TensorDataset(torch.arange(5)), batch_size=2))]
out = {"world": session.world_size, "dp": [session.data_parallel_rank, session.data_parallel_size],
       "seen": seen, "evaluated": evaluated, "gathered": session.gather(torch.arange(3)).tolist(),
       "sum": session.all_reduce(1.0, op="sum"), "mean": session.all_reduce(float(session.rank), op="mean")}
Path(sys.argv[1], f"rank{session.rank}.json").write_text(json.dumps(out))
session.close()
