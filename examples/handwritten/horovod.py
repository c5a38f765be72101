"""Hand-written Horovod (the seed's Horovod snippet, made runnable): the baseline paratrain is measured against.

Written for horovodrun, as Horovod scripts are; it runs unchanged under ``paratrain run`` too:

    horovodrun -np 2 -H localhost:2 --gloo python examples/handwritten/horovod.py --steps 200
    paratrain run --strategy horovod --nproc 2 examples/handwritten/horovod.py --steps 200

What the seed's snippet leaves out, added here: the device pinned by *local* rank only when there is a GPU, and each
rank training its contiguous slice of every global batch (so the loss curve matches single.py). Like the seed, it
does not call ``hvd.broadcast_optimizer_state`` on the fresh optimizer: Horovod creates the missing state by taking
a step with zero gradients, which AdamW counts (and decays the weights by) — a resumed optimizer needs it, a new
one does not.
"""

import os
import sys

# This file is named horovod.py (one baseline per method name): keep its own folder off the import path, so
# `import horovod` finds the library rather than this script.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

sys.path.insert(0, os.path.join(HERE, ".."))
from common import build_model, make_dataset, make_optimizer, parse_args, write_results  # noqa: E402


def main() -> None:
    args = parse_args()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    model = build_model().to(device)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step = [], 0
    while step < args.steps:
        for x, y in loader:
            # global batch -> this rank's contiguous chunk (sizes differ by at most one)
            x, y = x.tensor_split(world)[rank].to(device), y.tensor_split(world)[rank].to(device)
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()  # waits for the gradient allreduce that backward started
            losses.append(hvd.allreduce(loss.detach(), name="loss").item())  # averaged over ranks
            step += 1
            if step >= args.steps:
                break
    if rank == 0:
        print(f"final loss {losses[-1]:.4f}")
        write_results(args.out, losses, model.state_dict())
    hvd.shutdown()


if __name__ == "__main__":
    main()
