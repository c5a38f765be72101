"""What torchrun's forkserver imports once, before it forks a job's ranks (``torchrun.py``).

Every rank would otherwise import torch itself — and torch._dynamo, which the first optimizer imports
(``torch.optim``'s ``add_param_group``): about 3 s of CPU per rank on a 2-core machine, paid again by every rank of
every job. They are imported here with the collector paused and then frozen (``torch_import``), so the forked ranks
neither rescan nor copy those pages. Importing torch creates no CUDA context, so a forked rank still picks its GPU.
"""

import contextlib
import os

from paratrain.launcher import torch_import, worker  # noqa: F401  (the worker's own imports come along)

# The job's standard input, kept on a spare descriptor: multiprocessing gives each forked rank /dev/null instead, and a
# rank's pdb (torch.distributed.breakpoint) or input() reads the terminal under torchrun's usual start.
STDIN: int | None = None
with contextlib.suppress(OSError):
    STDIN = os.dup(0)

torch_import.load_torch()
with torch_import.collector_paused():
    import torch._dynamo  # noqa: F401
