"""A Session loop in which one rank leaves the lock-step at step 5, in the way argv[1] names.

exit   rank 1 calls sys.exit(3) between forward and backward
kill   rank 1 SIGKILLs itself between forward and backward
sleep  rank 1 sleeps (practically) forever between forward and backward
skip   rank 1 skips a session.all_reduce that rank 0 makes
eval   rank 0 runs an extra forward pass alone (main-rank-only evaluation), then every rank saves a checkpoint
"""
import os
import signal
import sys
import time

import torch

import paratrain as pt

mode, out = sys.argv[1], sys.argv[2]
session = pt.Session()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, _ = session.prepare(model, optimizer)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for step in range(1, 1000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    if step == 5 and session.rank == 1 and mode == "exit":
        sys.exit(3)
    if step == 5 and session.rank == 1 and mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if step == 5 and session.rank == 1 and mode == "sleep":
        time.sleep(3600)
    session.backward(loss)
    session.step()
    if step == 5 and mode == "skip" and session.rank == 0:
        session.all_reduce(loss)
    if step == 5 and mode == "eval":
        if session.is_main:
            with torch.no_grad():
                model(x)
        session.save(os.path.join(out, "ckpt"))
    if step == 20:
        break
