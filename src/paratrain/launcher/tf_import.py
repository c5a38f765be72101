"""Import TensorFlow without its start-up log lines, in the workers of a quiet TensorFlow launch.

`import tensorflow` (2.21) writes, from C++ and before anything a script can configure:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1796398829.889742    3036 port.cc:153] oneDNN custom operations are on. You may see ...

and it writes them twice: two of its shared libraries (``libtensorflow_framework.so.2`` and the profiler's
``_pywrap_profiler_plugin.so``) each carry their own copy of absl's logging and of the code that prints them, and
both load during the import. ``TF_CPP_MIN_LOG_LEVEL=2``, which the launcher sets, does not
reach them (absl logs everything to stderr until it is initialised), so a 2-worker job printed four of them around
the script's output. Turning oneDNN off (``TF_ENABLE_ONEDNN_OPTS=0``) would silence one and change the numerics.

So in a quiet launch (no ``--verbose``) the worker runs the import of tensorflow with file descriptor 2 pointed at
a temporary file, then writes back everything the import wrote except absl's INFO and WARNING lines and that
notice — what ``TF_CPP_MIN_LOG_LEVEL=2`` means to hide. Errors (``E…``/``F…`` lines), Python warnings and a failing
import's traceback come through unchanged. As for torch (:mod:`paratrain.launcher.torch_import`), the hook waits
for the script's own ``import tensorflow``, so environment variables the script sets before it still count.

The same hook is where every worker of a TensorFlow launch, quiet or not, sets up what the method asked for as soon
as the import has finished (:mod:`paratrain.launcher.tf_setup`: ``--nproc`` replicas for ``mirrored``, and a record
of the strategy the script builds).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
from types import ModuleType

from paratrain.console import stderr_without
from paratrain.launcher import tf_setup
from paratrain.launcher.import_hook import Execute, ImportHook


def quiet_env(env: dict[str, str], verbose: bool) -> None:
    """TensorFlow's start-up lines hidden in the workers unless ``--verbose`` (any launch that may run Keras)."""
    from paratrain.distenv import QUIET_TF_VAR

    if not verbose:
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        env[QUIET_TF_VAR] = "1"  # and the lines that level does not reach (this module's hook)

# absl's prefix: severity, MMDD hh:mm:ss.micro, thread id, file:line] — I(nfo) and W(arning) are start-up noise.
# Before absl is initialised the date is 0000 and the clock 00:00:<seconds since the epoch>.
_ABSL_QUIET = re.compile(rb"^[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\] ")
_NOTICES = (b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
            b"To enable the following instructions:")  # cpu_feature_guard's second line, when INFO is shown


def is_noise(line: bytes) -> bool:
    """Whether a line TensorFlow wrote while being imported is start-up chatter (absl INFO/WARNING, its notice)."""
    return bool(_ABSL_QUIET.match(line)) or line.startswith(_NOTICES)


def without_noise(text: bytes) -> bytes:
    return b"".join(line for line in text.splitlines(keepends=True) if not is_noise(line))


def quiet_stderr() -> contextlib.AbstractContextManager[None]:
    """Run the block with fd 2 in a temporary file, then write what it held back to stderr, less the noise."""
    return stderr_without(is_noise)


def _set_up(execute: Execute, module: ModuleType, quiet: bool) -> None:
    """The import (under :func:`quiet_stderr` in a quiet launch), then :func:`tf_setup.prepare`."""
    with quiet_stderr() if quiet else contextlib.nullcontext():
        execute(module)
        tf_setup.prepare(module)  # its device queries can log start-up lines of their own


_hook = ImportHook("tensorflow", functools.partial(_set_up, quiet=True))


def install(quiet: bool = True) -> None:
    """In a worker of a TensorFlow launch, before the script runs; ``quiet`` filters the import's stderr."""
    _hook.around = functools.partial(_set_up, quiet=quiet)
    _hook.install()


def uninstall() -> None:
    _hook.uninstall()
