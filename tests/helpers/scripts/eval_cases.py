"""Evaluation under the launched method: argv[1] is the JSON file rank 0 writes.

sharding  prepare_eval (before prepare) over TensorDataset(arange(n)) for several (n, batch_size): each rank's
          batch sizes and len(), the gathered indices, whether every rank gathered range(n), a second pass
model     a fixed tiny model (Linear, BatchNorm1d in eval mode, Linear) evaluated after prepare: gathered logits,
          summed loss and accuracy through all_reduce (batch_size 1 gives some rank a 0-sample batch)
gather    gather() edge cases: 0-dim, uneven and empty rows, all empty, bool, a trailing-shape mismatch
"""
import json
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt
from paratrain.errors import ConfigError

SHARDING = [(10, 3), (10, 1), (2, 1), (2, 3), (7, 2), (1, 1), (12, 4)]

session = pt.Session()
world = session.world_size
out: dict = {"world": world, "sharding": [], "model": [], "gather": {}}


def every_rank(flag: bool) -> list[bool]:
    return session.gather(torch.tensor(flag)).tolist()


for n, bs in SHARDING:
    loader = session.prepare_eval(DataLoader(TensorDataset(torch.arange(n)), batch_size=bs, shuffle=True))
    first = [x for (x,) in loader]
    second = [x for (x,) in loader]
    gathered = session.gather(torch.cat(first)).tolist()
    sizes = [len(x) for x in first]
    out["sharding"].append({
        "n": n, "batch_size": bs, "gathered": gathered,
        "every_rank_range": every_rank(gathered == list(range(n))),
        "len": session.gather(torch.tensor(len(loader))).tolist(),
        "yielded": session.gather(torch.tensor(len(first))).tolist(),
        "sizes": session.gather(torch.tensor([sizes])).tolist(),  # same length on every rank, or gather refuses
        "dtypes_ok": every_rank(all(x.dtype == torch.int64 and x.dim() == 1 for x in first)),
        "second_pass_same": every_rank([x.tolist() for x in first] == [x.tolist() for x in second]),
        "indices_ok": every_rank(loader.indices == torch.cat(first).tolist()),
    })

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
with torch.no_grad():  # running statistics that matter, so eval-mode BatchNorm is not an identity
    model[1].running_mean.uniform_(-0.5, 0.5)
    model[1].running_var.uniform_(0.5, 2.0)
model, _, _ = session.prepare(model)
model.eval()
gen = torch.Generator().manual_seed(1)
data = TensorDataset(torch.randn(11, 4, generator=gen), torch.randint(0, 3, (11,), generator=gen))
for bs in (1, 4):
    loader = session.prepare_eval(DataLoader(data, batch_size=bs))
    loss, correct, logits, sizes = torch.zeros(()), torch.zeros(()), [], []
    with torch.no_grad():
        for x, y in loader:
            sizes.append(len(y))
            z = model(x)
            loss += torch.nn.functional.cross_entropy(z, y, reduction="sum")
            correct += (z.argmax(1) == y).sum()
            logits.append(z)
    total = session.all_reduce(torch.tensor(float(len(loader.indices))), op="sum")
    out["model"].append({
        "batch_size": bs, "logits": session.gather(torch.cat(logits)).tolist(),
        "sizes": session.gather(torch.tensor([sizes])).tolist(),
        "loss_sum": session.all_reduce(loss, op="sum").item(),
        "accuracy": (session.all_reduce(correct, op="sum") / total).item(), "samples": total.item(),
    })

rank = session.rank
g = out["gather"]
g["scalar"] = session.gather(torch.tensor(float(rank))).tolist()
rows = session.gather(torch.full((rank, 2), rank))
g["rows"], g["rows_shape"] = rows.tolist(), list(rows.shape)
g["all_empty_shape"] = list(session.gather(torch.zeros(0, 3)).shape)
g["bool"] = session.gather(torch.tensor([rank % 2 == 0])).tolist()
g["detached"] = not session.gather(torch.ones(2, requires_grad=True) * 2).requires_grad
if world > 1:
    try:
        session.gather(torch.zeros(1, 2 + rank))
        mismatch = False
    except ConfigError:
        mismatch = True
    g["mismatch_raised"] = every_rank(mismatch)

if session.is_main:
    Path(sys.argv[1]).write_text(json.dumps(out))
session.close()
