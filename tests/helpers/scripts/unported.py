"""A script run with `paratrain run -n 2` that joins its job, or not, in the way argv[1] names.

plain                an unported single-process loop (no Session, no init_process_group) that saves OUT/model.pt
init-destroy         a native torchrun script that joins a gloo group, all-reduces, and destroys it before it ends
store-destroy        the same with a group made from its own store (OUT/store) rather than an init method
hvd-init-shutdown    a native Horovod script that calls hvd.init(), all-reduces, and shuts Horovod down itself
"""
import sys
from pathlib import Path

import torch

mode, out = sys.argv[1], Path(sys.argv[2])
if mode == "plain":
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    for _ in range(5):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / "model.pt")
elif mode in ("init-destroy", "store-destroy"):
    import os

    import torch.distributed as dist

    if mode == "store-destroy":
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", store=dist.FileStore(str(out / "store"), world), rank=rank, world_size=world)
    else:
        dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == dist.get_world_size()
    dist.destroy_process_group()
elif mode == "hvd-init-shutdown":
    import horovod.torch as hvd

    hvd.init()
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()
    hvd.shutdown()
print("done", flush=True)
