"""A native torchrun script (no Session) that ends in the way argv[1] names, on rank 1.

left-up     every rank leaves its process group up and registers an atexit handler that writes OUT/atexit<rank>
kill        rank 1 SIGKILLs itself in the middle of the script
abort       rank 1 aborts (SIGABRT) in the middle of the script
abort-exit  rank 1 finishes its script, then aborts in an atexit handler (as gloo can at shutdown)
"""
import atexit
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist

mode, out = sys.argv[1], Path(sys.argv[2])
dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(1)
dist.all_reduce(t)
if mode == "left-up":
    atexit.register(lambda: (out / f"atexit{rank}").write_text(str(t.item())))
if rank == 1 and mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if rank == 1 and mode == "abort":
    os.abort()
if rank == 1 and mode == "abort-exit":
    atexit.register(os.abort)
print(f"rank {rank} done", flush=True)
