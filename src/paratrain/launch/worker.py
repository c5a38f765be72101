"""What torchrun starts in every process: the user's script, under torchelastic's error recorder.

``@record`` writes the exception of a failing rank to torchrun's per-rank error file, which is how the launcher
knows which rank failed first and shows its traceback.
"""

from __future__ import annotations

import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m paratrain.launch.worker SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
