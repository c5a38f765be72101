"""What torchrun runs in each rank when it forks the ranks from its forkserver (``--run-path``, see torchrun.py).

The rank is a child of a server process that has already imported torch (``preload``), so it starts in a
fraction of the time ``python -m paratrain.launcher.worker`` takes. It is the same worker; only its way out
differs. torchrun reads a forked rank's success from the value it returns, so a finished script returns here (the
multiprocessing child then leaves with ``os._exit``, skipping the finalization in which gloo can abort); a failed one
leaves at once with its exit code, as the worker would.
"""

import os
import sys

from paratrain.launcher import preload, worker

if preload.STDIN is not None:  # the job's standard input back, where multiprocessing put /dev/null
    os.dup2(preload.STDIN, 0)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (standard input stays open for the process's life)
_code = worker.run(sys.argv[1], sys.argv[2:])
if _code:
    worker.flush_output()
    os._exit(_code)
