"""Write what this worker really trains with (torch's intra-op threads, the OpenMP variable, its pid, whether the
garbage collector runs, whether torch was imported before the script) to DIR."""
import gc
import json
import os
import sys
from pathlib import Path

TORCH_PRELOADED = "torch" in sys.modules

import torch  # noqa: E402

out = sys.argv[1]
rank = os.environ.get("RANK", "0")
with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
    json.dump({"torch_threads": torch.get_num_threads(), "omp": os.environ.get("OMP_NUM_THREADS"),
               "pid": os.getpid(), "ppid": os.getppid(), "gc_enabled": gc.isenabled(),
               "torch_preloaded": TORCH_PRELOADED, "frozen": gc.get_freeze_count(),
               "cmdline": Path("/proc/self/cmdline").read_text().split("\0")}, fh)
