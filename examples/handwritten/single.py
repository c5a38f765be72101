"""Hand-written single-process training: the reference every method must reproduce.

    python examples/handwritten/single.py --steps 200 --out /tmp/ref
"""

import os
import sys

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import build_model, make_dataset, make_optimizer, parse_args, write_results


def main() -> None:
    args = parse_args()
    model = build_model()
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses, step = [], 0
    while step < args.steps:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            step += 1
            if step >= args.steps:
                break
    print(f"final loss {losses[-1]:.4f}")
    write_results(args.out, losses, model.state_dict())


if __name__ == "__main__":
    main()
