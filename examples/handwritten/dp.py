"""Hand-written torch.nn.DataParallel (the seed's first snippet, made runnable).

One process; DataParallel scatters each batch over all visible GPUs and gathers outputs on GPU 0. Without GPUs it
simply runs the module on the CPU.

    python examples/handwritten/dp.py --steps 200
"""

import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import build_model, make_dataset, make_optimizer, parse_args, write_results


def main() -> None:
    args = parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = build_model().to(device)
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = nn.CrossEntropyLoss()
    losses, step = [], 0
    while step < args.steps:
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            loss = criterion(model(inputs), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            step += 1
            if step >= args.steps:
                break
    print(f"final loss {losses[-1]:.4f}")
    inner = model.module if isinstance(model, nn.DataParallel) else model
    write_results(args.out, losses, inner.state_dict())


if __name__ == "__main__":
    main()
