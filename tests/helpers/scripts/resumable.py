"""The common MLP under a Session, 60 steps, shuffled; rank 1 dies on the first attempt where KILL says.

KILL=step:N   rank 1 SIGKILLs itself right after optimizer step N
KILL=save:N   rank 1 SIGKILLs itself inside the checkpoint save of step N, after its model shard was written
Writes OUT/losses-<attempt>.json ({step: loss}) and, on rank 0 at the end, OUT/weights.pt.
"""
import json
import os
import signal
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from common import build_model, make_dataset

import paratrain as pt
from paratrain import checkpoint

out, steps = Path(sys.argv[1]), int(sys.argv[2])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
kind, _, at = os.environ.get("KILL", ":").partition(":")
doomed = attempt == 0 and os.environ.get("RANK") == "1" and kind


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


session = pt.Session()
model = build_model()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
loader = DataLoader(make_dataset(200), batch_size=16, shuffle=True)
model, optimizer, loader = session.prepare(model, optimizer, loader)
if doomed and kind == "save":
    real = checkpoint._rng_state  # called by every rank after its DCP shard is on disk

    def rng_state_then_die():
        if session.step_count == int(at):
            die()
        return real()

    checkpoint._rng_state = rng_state_then_die
losses = {}
while session.step_count < steps:
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        session.backward(loss)
        session.step()
        losses[session.step_count] = float(session.all_reduce(loss.detach(), op="mean"))
        if doomed and kind == "step" and session.step_count == int(at):
            die()
        if session.step_count >= steps:
            break
if session.is_main:
    (out / f"losses-{attempt}.json").write_text(json.dumps(losses))
state = session.model_state_dict()
if session.is_main:
    torch.save(state, out / "weights.pt")
