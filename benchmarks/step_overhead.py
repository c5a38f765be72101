"""The Session's per-step cost over the hand-written loop, measured inside one job so machine noise cancels.

    paratrain run --strategy ddp --nproc 2 benchmarks/step_overhead.py [--steps 800] [--workload mlp]
    paratrain run --strategy deepspeed:zero2 --nproc 2 benchmarks/step_overhead.py

Why a second benchmark next to overhead.py: on a shared 2-core machine two identical jobs differ by up to 30 % in
step time, so comparing separate processes cannot resolve the 1 % target. Here one job alternates blocks of ten
steps between the Session (``session.backward`` / ``session.step``, metrics and all) and the loop the seed's
snippet writes on the very same wrapped model, optimizer and batches (``loss.backward(); optimizer.step();
optimizer.zero_grad()``, or the DeepSpeed engine's ``backward`` / ``step``). Both sides see the same noise; the
median of each side's steps gives the ratio. The data loading is the same for both and left out of the timing.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import paratrain
from paratrain.workloads import get

BLOCK = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--workload", default="mlp")
    args = parser.parse_args()
    workload = get(args.workload)
    built = workload.build()
    session = paratrain.Session()
    optimizer = torch.optim.AdamW(built.model.parameters(), lr=workload.lr)
    loader = torch.utils.data.DataLoader(built.train, batch_size=workload.global_batch, shuffle=True)
    model, optimizer, loader = session.prepare(built.model, optimizer, loader)
    engine = hasattr(model, "backward")  # a DeepSpeed engine: the seed's snippet calls its backward/step

    def handwritten(loss: torch.Tensor) -> None:
        if engine:
            model.backward(loss)
            model.step()
        else:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def with_session(loss: torch.Tensor) -> None:
        session.backward(loss)
        session.step()

    times: dict[str, list[float]] = {"handwritten": [], "session": []}
    step = 0
    while step < args.steps:
        for x, y in loader:
            side = "session" if (step // BLOCK) % 2 else "handwritten"
            started = time.perf_counter()
            loss = built.loss_fn(model(x), y)
            (with_session if side == "session" else handwritten)(loss)
            times[side].append(time.perf_counter() - started)
            step += 1
            if step >= args.steps:
                break
    medians = {side: statistics.median(t[2 * BLOCK:]) for side, t in times.items()}  # first blocks: warm-up
    if session.is_main:
        print(f"{session.strategy} ×{session.world_size} {args.workload}: hand-written "
              f"{medians['handwritten'] * 1e3:.3f} ms, Session {medians['session'] * 1e3:.3f} ms, "
              f"ratio {medians['session'] / medians['handwritten']:.4f}")


if __name__ == "__main__":
    main()
