"""Every rank notes its pid in argv[1], then the last rank sleeps while the others wait for it in a collective."""
import os
import sys
import time
from pathlib import Path

import torch

import paratrain as pt

session = pt.Session()
(Path(sys.argv[1]) / str(os.getpid())).write_text("")
session.all_reduce(torch.ones(1))
if session.rank == session.world_size - 1:
    time.sleep(3600)
session.all_reduce(torch.ones(1))
