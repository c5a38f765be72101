"""Hand-written pipeline parallelism with torch.distributed.pipelining (GPipe's idea, the 1F1B schedule), made
runnable.

Launch with torchrun:

    torchrun --nproc-per-node 2 examples/handwritten/pp.py --steps 200

Each rank keeps a contiguous run of the model's layers (a stage) and deletes the rest. Every rank reads the whole
batch; the first stage feeds it in, cut into micro-batches, the last computes the loss, and the schedule runs the
forward and backward passes of the micro-batches so that the stages work at the same time. The loss is divided by the
number of micro-batches (the schedule's default ``scale_grads`` divides the gradients back), so the gradients are
those of the whole batch's mean loss. The last stage's loss is broadcast so that every rank can log it.
"""

import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import build_model, leave_process_group, make_dataset, make_optimizer, parse_args, write_results

MICRO_BATCHES = 4


def main() -> None:
    args = parse_args()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    model = build_model()  # seeds itself: every rank builds the same weights, then keeps its own layers
    layers = len(model)
    mine = range(rank * layers // world, (rank + 1) * layers // world)
    for index in [name for i, name in enumerate(list(model._modules)) if i not in mine]:
        del model._modules[index]  # the others' layers; the names of this stage's stay "2.weight", ...
    model.to(device)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    criterion = torch.nn.CrossEntropyLoss()
    stage = PipelineStage(model, rank, world, device)
    schedule = Schedule1F1B(stage, n_microbatches=MICRO_BATCHES, loss_fn=criterion)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for x, y in loader:
                micro_losses = []
                if rank == 0:
                    schedule.step(x.to(device))
                elif rank == world - 1:
                    schedule.step(target=y.to(device), losses=micro_losses)
                else:
                    schedule.step()
                optimizer.step()
                optimizer.zero_grad()
                loss = torch.stack(micro_losses).mean() if micro_losses else torch.zeros((), device=device)
                dist.broadcast(loss, src=world - 1)
                losses.append(loss.item())
                step += 1
                if step >= args.steps:
                    break
        # the whole model: every stage's layers, gathered (each stage holds different names)
        parts = [None] * world
        dist.all_gather_object(parts, {k: v.cpu() for k, v in model.state_dict().items()})
        if rank == 0:
            print(f"final loss {losses[-1]:.4f}")
            write_results(args.out, losses, {k: v for part in parts for k, v in part.items()})
        ok = True
    finally:
        leave_process_group(ok)


if __name__ == "__main__":
    main()
