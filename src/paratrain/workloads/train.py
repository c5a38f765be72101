"""The training script `paratrain compare` launches for a bundled workload: an ordinary Session script.

    paratrain run -s ddp -n 2 src/paratrain/workloads/train.py --workload gpt --steps 20
    python src/paratrain/workloads/train.py --workload mlp
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader

import paratrain as pt
from paratrain import metrics
from paratrain.workloads import get
from paratrain.workloads.base import Built

EVAL_BATCH = 256


def evaluate(session: pt.Session, model: torch.nn.Module, built: Built) -> dict[str, float]:
    """Every rank scores its exactly-once share of the test set; the sums are added over ranks. (Under sharded
    methods every forward is a collective: a main-rank-only evaluation would wait for the other ranks forever.)"""
    model.eval()
    sums: dict[str, float] = {}
    with torch.no_grad():
        for x, y in session.prepare_eval(DataLoader(built.test, batch_size=EVAL_BATCH)):
            for key, value in built.score(model(x), y).items():
                sums[key] = sums.get(key, 0.0) + value
    total = {key: float(session.all_reduce(value, op="sum")) for key, value in sorted(sums.items())}
    return built.finish(total)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Train a bundled paratrain workload.")
    p.add_argument("--workload", default="mlp")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="global batch (per rank with --per-rank-batch)")
    p.add_argument("--per-rank-batch", action="store_true", help="weak scaling: batch size is per rank")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--width", type=int, default=None, help="hidden size (mlp), channels (cnn), model dim (gpt)")
    p.add_argument("--depth", type=int, default=None, help="transformer blocks (gpt only)")
    args = p.parse_args(argv)
    workload = get(args.workload)
    steps = args.steps or workload.steps
    size = {k: v for k, v in (("width", args.width), ("depth", args.depth)) if v is not None}
    session = pt.Session(per_rank_batch=args.per_rank_batch or None)  # None: as paratrain run says
    built = workload.build(**size, init=session.init_module)  # fsdp, zero3: only rank 0 holds the whole model
    lr = args.lr or workload.lr
    if workload.momentum is not None:
        optimizer = torch.optim.SGD(built.model.parameters(), lr=lr, momentum=workload.momentum)
    else:
        optimizer = torch.optim.AdamW(built.model.parameters(), lr=lr)
    loader = DataLoader(built.train, batch_size=args.batch_size or workload.global_batch, shuffle=True)
    model, optimizer, loader = session.prepare(built.model, optimizer, loader)
    loss = torch.zeros(())
    while session.step_count < steps:
        for x, y in loader:
            loss = session.train_step(x, y, built.loss_fn)  # forward, loss, backward, step: under pp too
            if session.step_count >= steps:
                break
    final = float(session.all_reduce(loss, op="mean"))
    result = evaluate(session, model, built)
    metrics.log(final_loss=final, **result)
    session.print(f"{workload.slug} {session.strategy}×{session.world_size}: loss {final:.4f} "
                  + " ".join(f"{k} {v:.4f}" for k, v in result.items()))
    session.close()


if __name__ == "__main__":
    main()
