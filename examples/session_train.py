"""The same training as examples/handwritten/*.py, written once with paratrain.Session.

Runs unchanged under every method:

    python examples/session_train.py                                   # single process
    paratrain run --strategy ddp --nproc 2 examples/session_train.py
    paratrain run --strategy fsdp --nproc 4 examples/session_train.py --optimizer adamw
    paratrain run --strategy tp --nproc 2 examples/session_train.py   # tensor parallel: by model.tp_plan below
    paratrain run --strategy pp --nproc 2 examples/session_train.py   # pipeline parallel: layers 0-2, then 3-4
    paratrain run -s ddp -n 2 examples/session_train.py --save ckpt/   # then resume anywhere with --load ckpt/
"""

import contextlib
import os
import sys

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import build_model, make_dataset, make_optimizer, parse_args, write_results

import paratrain as pt


def main() -> None:
    args = parse_args()
    extra = parse_extra()
    session = pt.Session(grad_accum=extra.grad_accum)
    with session.init_module() if extra.init_module else contextlib.nullcontext():
        model = build_model()
    # How --strategy tp splits it (the other methods ignore it): the first Linear by its outputs, the second by its
    # inputs, so the ranks share the hidden units and all-reduce once per layer pair.
    model.tp_plan = {"0": "colwise", "2": "rowwise"}
    optimizer = make_optimizer(args.optimizer, model.parameters(), args.lr)
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=args.shuffle)
    model, optimizer, loader = session.prepare(model, optimizer, loader)
    if extra.load:
        session.load(extra.load)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses = []
    running = torch.zeros(())
    while session.step_count < args.steps:
        for x, y in loader:
            before = session.step_count
            # forward, loss, backward, and the optimizer step once grad_accum micro-batches are done. The same as
            # `loss = loss_fn(model(x), y); session.backward(loss); session.step()`, which every method but pp runs.
            loss = session.train_step(x, y, loss_fn)
            running += loss.cpu() / session.grad_accum
            if session.step_count > before:  # a whole global batch is done
                losses.append(float(session.all_reduce(running, op="mean")))
                running.zero_()
                if session.step_count % 50 == 0:
                    session.print(f"step {session.step_count} loss {losses[-1]:.4f}")
            if session.step_count >= args.steps:
                break
    if extra.save:
        session.save(extra.save)
    state = session.model_state_dict()
    if session.is_main:
        print(f"{session.strategy} x{session.world_size}: final loss {losses[-1]:.4f}")
        write_results(args.out, losses, state, world_size=session.world_size, strategy=session.strategy)


def parse_extra():
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--grad-accum", type=int, default=None, help="micro-batches per step (or run --grad-accum)")
    p.add_argument("--save", default=None, help="checkpoint directory to write at the end")
    p.add_argument("--load", default=None, help="checkpoint directory to resume from")
    p.add_argument("--init-module", action="store_true",
                   help="build the model inside session.init_module() (fsdp, zero3: only rank 0 holds it whole)")
    return p.parse_known_args()[0]


if __name__ == "__main__":
    main()
