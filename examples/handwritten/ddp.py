"""Hand-written DistributedDataParallel (the seed's DDP snippet, made runnable and correct).

Launch with torchrun (it sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT):

    torchrun --nproc-per-node 2 examples/handwritten/ddp.py --steps 200

Each rank takes its contiguous slice of every global batch (so the loss curve matches single.py), gradients are
averaged by DDP during backward, and the process group is destroyed at the end.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import build_model, leave_process_group, make_dataset, make_optimizer, parse_args, write_results


def main() -> None:
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    model = DDP(build_model().to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for x, y in loader:
                # global batch -> this rank's contiguous chunk (sizes differ by at most one)
                x, y = x.tensor_split(world)[rank].to(device), y.tensor_split(world)[rank].to(device)
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                losses.append(mean.item() / world)
                step += 1
                if step >= args.steps:
                    break
        if rank == 0:
            print(f"final loss {losses[-1]:.4f}")
            write_results(args.out, losses, model.module.state_dict())
        ok = True
    finally:
        leave_process_group(ok)


if __name__ == "__main__":
    main()
