"""Hand-written FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded over ranks.

    torchrun --nproc-per-node 2 examples/handwritten/fsdp.py --steps 200

Every rank builds the same model (same seed), each Linear becomes an FSDP unit, then the root; the optimizer is
created after sharding so it holds the sharded parameters.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
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
    model = build_model().to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for x, y in loader:
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
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        if rank == 0:
            print(f"final loss {losses[-1]:.4f}")
            write_results(args.out, losses, full)
        ok = True
    finally:
        leave_process_group(ok)


if __name__ == "__main__":
    main()
