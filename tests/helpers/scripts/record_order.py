"""Each rank writes the sample indices of every micro-batch it receives to OUT/rank<r>.json."""
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

out, samples, batch, accum = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
session = pt.Session(grad_accum=accum)
data = TensorDataset(torch.arange(samples))
model = torch.nn.Linear(1, 1)
model, _, loader = session.prepare(model, None, DataLoader(data, batch_size=batch, shuffle=False))
seen = [batch_idx.tolist() for (batch_idx,) in loader]
out.mkdir(parents=True, exist_ok=True)
(out / f"rank{session.rank}.json").write_text(json.dumps({"world": session.world_size, "batches": seen}))
