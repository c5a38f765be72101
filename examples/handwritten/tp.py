"""Hand-written tensor parallelism with PyTorch's DTensor (Megatron-LM's split of an MLP, made runnable).

Launch with torchrun:

    torchrun --nproc-per-node 2 examples/handwritten/tp.py --steps 200

Every rank reads the whole batch. The first Linear is split by its outputs (ColwiseParallel: each rank computes half
of the hidden units), the second by its inputs (RowwiseParallel: each rank multiplies its half, then the partial
results are all-reduced), so the model is trained in one piece while each rank holds half of those two matrices.
The layers outside the plan stay whole on every rank and compute the same values there.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
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
    mesh = init_device_mesh(device.type, (world,))
    # build_model() seeds itself: every rank builds the same weights before taking its slices
    model = parallelize_module(build_model().to(device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)  # after the split: on the slices
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for x, y in loader:
                loss = criterion(model(x.to(device)), y.to(device))  # the same batch, and loss, on every rank
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                losses.append(loss.item())
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
