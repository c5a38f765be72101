"""A plain torchrun-style DDP script, nothing of paratrain's: the shape of the job that hung at exit."""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(10, 10))
for _ in range(20):
    model(torch.randn(4, 10)).sum().backward()
dist.destroy_process_group()
print("rank", os.environ["RANK"], "done", flush=True)
