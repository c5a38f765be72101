"""Hand-written FSDP + tensor parallelism on a 2-D device mesh (PyTorch's DTensor, as torchtitan combines them).

Launch with torchrun, 4 processes (2 groups of 2):

    torchrun --nproc-per-node 4 examples/handwritten/fsdp_tp.py --steps 200

The ranks form a 2 × 2 grid. Within a row, the two ranks split the MLP as examples/handwritten/tp.py does and read
the same rows of the batch; FSDP then shards each row's slices across the two rows, which read different halves of
every global batch (the data-parallel replicas).
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import build_model, leave_process_group, make_dataset, make_optimizer, parse_args, write_results


def main() -> None:
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    mesh = init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("dp", "tp"))
    # build_model() seeds itself: every rank builds the same weights before taking its slices
    model = parallelize_module(build_model().to(device), mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    replica, replicas = mesh["dp"].get_local_rank(), world // 2
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)  # after the split: on the slices
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for x, y in loader:
                # this row's contiguous chunk of the global batch; FSDP averages the gradients over the rows
                x, y = x.tensor_split(replicas)[replica].to(device), y.tensor_split(replicas)[replica].to(device)
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                mean = loss.detach().clone()
                dist.all_reduce(mean, group=mesh["dp"].get_group())
                losses.append(mean.item() / replicas)
                step += 1
                if step >= args.steps:
                    break
        # the whole model, assembled from the slices (every rank takes part)
        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        if rank == 0:
            print(f"final loss {losses[-1]:.4f}")
            write_results(args.out, losses, state)
        ok = True
    finally:
        leave_process_group(ok)


if __name__ == "__main__":
    main()
