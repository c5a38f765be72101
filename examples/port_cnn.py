"""An ordinary PyTorch training script, ported to paratrain: the README's "Port your script" walks through it.

A CNN with BatchNorm and dropout on the 8×8 digits, train + validation loaders, AdamW, a cosine LR schedule,
gradient clipping, a checkpoint per epoch that a restarted run resumes from, tqdm on the main rank. The same file
runs under every method:

    python examples/port_cnn.py                                        # one process
    paratrain run --strategy ddp --nproc 2 examples/port_cnn.py
    paratrain run --strategy fsdp --nproc 2 examples/port_cnn.py --epochs 6   # resumes from ckpt/last
    paratrain compare --script examples/port_cnn.py --script-args "--ckpt-dir none"
"""

import argparse
import math
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

import paratrain as pt


def digits() -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
    y = torch.tensor(data.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    val, train = order[:297], order[297:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[val], y[val])


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(32 * 16, 10),
    )


def evaluate(session: pt.Session, model: nn.Module, loader) -> dict[str, float]:
    """Every rank scores its share (each sample exactly once); sums are added over ranks."""
    model.eval()
    loss_sum = correct = count = 0.0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss_sum += float(nn.functional.cross_entropy(logits, y, reduction="sum"))
            correct += float((logits.argmax(1) == y).sum())
            count += len(y)
    loss_sum, correct, count = (session.all_reduce(v, op="sum") for v in (loss_sum, correct, count))
    model.train()
    return {"val_loss": loss_sum / count, "val_acc": correct / count}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64, help="global batch, whatever the number of processes")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--clip", type=float, default=1.0, help="max global gradient norm")
    p.add_argument("--ckpt-dir", default="ckpt", help='checkpoint folder ("none": no checkpoints)')
    args = p.parse_args()

    torch.manual_seed(0)
    session = pt.Session(grad_clip=args.clip)  # was: device = "cuda"; clip_grad_norm_ before optimizer.step()
    train_set, val_set = digits()
    model = cnn()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    steps_per_epoch = math.ceil(len(train_set) / args.batch_size)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    # prepare: the model wrapped for the method, each rank's slice of every global batch, the scheduler stepped by
    # session.step(); with a scheduler it returns four values.
    model, optimizer, train_loader, scheduler = session.prepare(model, optimizer, train_loader, scheduler)
    val_loader = session.prepare_eval(DataLoader(val_set, batch_size=128))

    last = Path(args.ckpt_dir) / "last" if args.ckpt_dir != "none" else None
    if last is not None and last.exists():
        session.load(str(last))  # model, optimizer, scheduler, loader position: any method, any world size
        session.print(f"resumed from {last} at step {session.step_count}")
    start = session.step_count // steps_per_epoch

    for epoch in range(start, args.epochs):
        total = 0.0
        bar = tqdm(train_loader, desc=f"epoch {epoch + 1}", disable=not session.is_main, leave=False)
        for x, y in bar:
            loss = nn.functional.cross_entropy(model(x), y)
            session.backward(loss)  # was: loss.backward()
            session.step()  # was: clip_grad_norm_(...); optimizer.step(); optimizer.zero_grad(); scheduler.step()
            total += loss.item()
        scores = evaluate(session, model, val_loader)
        session.log(**scores)  # `paratrain compare` shows these beside the loss
        session.print(f"epoch {epoch + 1}: train loss {total / len(bar):.4f}  val loss {scores['val_loss']:.4f}  "
                      f"val acc {scores['val_acc']:.4f}  lr {scheduler.get_last_lr()[0]:.2e}")
        if last is not None:
            session.save(str(last))  # every rank calls it; written atomically
    session.close()


if __name__ == "__main__":
    main()
