"""Rank 1 raises an error whose message has several lines (the cause first, advice after, as Horovod's "has not
been built" does); rank 0 then fails too, once rank 1's failure is noted, so it is in its own failure handling when
the job is stopped. Plain Python: neither rank imports torch, so a failure path that imported it lazily would still
be importing when the signal comes.

argv[1] names the ranks that stay in their failure handling (a non-daemon thread the worker waits for on its way
out): "0" (the launcher stops rank 0 when rank 1 exits) or "both" (the job ends only when it is signalled).
Each rank writes OUT/failing<rank> just before it raises.
"""
import os
import sys
import threading
import time
from pathlib import Path

linger, out = sys.argv[1], Path(sys.argv[2])
rank = int(os.environ["RANK"])
if linger == "both" or str(rank) == linger:
    threading.Thread(target=time.sleep, args=(120,)).start()
if rank == 0:
    noted = Path(os.environ["PARATRAIN_FAILURES"]) / "rank1.failure.json"
    while not noted.exists():
        time.sleep(0.05)
    (out / "failing0").write_text("")
    raise RuntimeError("rank 0 lost its peer")
(out / "failing1").write_text("")
raise ImportError("Extension horovod.tensorflow has not been built: /site-packages/horovod/tensorflow/mpi_lib.so "
                  "not found\nIf this is not expected, reinstall Horovod with HOROVOD_WITH_TENSORFLOW=1 to debug the "
                  "build error.")
