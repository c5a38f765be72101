"""Checkpoint misuse from a plain `python` Session script: argv[1] names the case, argv[2] the directory.

save        train 3 steps and save DIR (the good checkpoint the other cases start from)
other-model load DIR into a model of another shape
load        load DIR into the same model (after the test corrupted or poisoned it)
disk-full   save DIR again under a 16 KiB file-size limit (a full disk, as far as the writer can tell)
"""
import resource
import signal
import sys

import torch

import paratrain as pt

case, folder = sys.argv[1], sys.argv[2]
session = pt.Session()
width = 3 if case == "other-model" else 64
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, width), torch.nn.Tanh(), torch.nn.Linear(width, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
model, optimizer, _ = session.prepare(model, optimizer)
x, y = torch.randn(16, 8), torch.randn(16, 1)
for _ in range(3):
    session.backward(torch.nn.functional.mse_loss(model(x), y))
    session.step()
if case == "save":
    session.save(folder)
elif case == "disk-full":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, 16 * 1024))
    session.save(folder)
else:
    session.load(folder)
print("loaded")
