"""What torchrun starts in every process: the user's script, under torchelastic's error recorder.

``@record`` writes the exception of a failing rank to torchrun's per-rank error file. torchrun's timestamps there
are whole seconds, so when rank 1 raises and rank 0 then fails on the closed connection in the same second, it
cannot tell which came first; each rank therefore also notes its own failure time (``PARATRAIN_FAILURES``) and the
launcher reports the earliest one — the root cause, not its echo.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record

from paratrain.distenv import FAILURES_VAR


@record
def _run_script() -> None:
    if len(sys.argv) < 2:
        raise SystemExit("usage: python -m paratrain.launch.worker SCRIPT [ARGS...]")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


def _note_failure(summary: str) -> None:
    from paratrain.strategies import _procgroup

    _procgroup.mark_failing()  # the Session's exit must not wait in a barrier for ranks that wait for us
    folder = os.environ.get(FAILURES_VAR)
    if not folder:
        return
    rank = os.environ.get("RANK", "0")
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))  # --max-restarts: only the last one counts
    try:
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as fh:
            json.dump({"rank": int(rank), "attempt": attempt, "time": time.time(), "error": summary}, fh)
    except OSError:
        pass  # the launcher falls back to torchrun's own error files


def main() -> None:
    """A ParatrainError (a user mistake, e.g. a bad option) is one line per rank, not a traceback."""
    from paratrain.errors import ParatrainError

    try:
        _run_script()
    except ParatrainError as exc:
        _note_failure(exc.one_line())
        if os.environ.get("PARATRAIN_DEBUG") == "1":
            raise
        rank = os.environ.get("RANK", "0")
        print(f"paratrain: error (rank {rank}): {exc.one_line()}", file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None
    except SystemExit as exc:
        if exc.code not in (None, 0):
            _note_failure(f"exited with {exc.code}")
        raise
    except BaseException as exc:
        last = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
        _note_failure(f"{type(exc).__name__}: {last}" if last else type(exc).__name__)
        raise


if __name__ == "__main__":
    main()
