"""A script written for horovodrun (no Session): the seed's Horovod recipe on the suite's data.

Rank 0 writes OUT/losses.json and OUT/weights.pt, so a run under `paratrain run --strategy horovod` can be compared
with the same script under `horovodrun` itself.
"""
import json
import sys
from pathlib import Path

import horovod.torch as hvd
import torch

out = Path(sys.argv[1])
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
data = torch.Generator().manual_seed(1)
x, y = torch.randn(64, 8, generator=data), torch.randn(64, 1, generator=data)
share = len(x) // hvd.size()
mine = slice(hvd.rank() * share, (hvd.rank() + 1) * share)
losses = []
for _ in range(30):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x[mine]), y[mine])
    loss.backward()
    optimizer.step()
    losses.append(hvd.allreduce(loss.detach(), name="loss").item())
if hvd.rank() == 0:
    out.mkdir(parents=True, exist_ok=True)
    (out / "losses.json").write_text(json.dumps({"losses": losses}))
    torch.save(model.state_dict(), out / "weights.pt")
print(f"rank {hvd.rank()} of {hvd.size()} done", flush=True)
