"""Import torch without the garbage collector rescanning it, in the launcher and in every worker.

`import torch` makes about 260,000 objects, and Python's collector — started by allocation counts — scans them over
and over while they are being made: 0.15–0.2 s of every process's start on the 2-core test machine (`import torch`
with and without gc.disable()). Afterwards, each full collection still walks all of them (0.1 s), for instance while
the optimizer imports torch._dynamo. So torch is imported with the collector paused, and what the import made is
then frozen (gc.freeze): later collections skip it, and a forked one-process script does not touch its pages.

The collector is paused only for the import of torch itself, never for the user's own code. Where torch is loaded
before the script (the launcher, torchrun's forkserver: ``preload``) it is imported here; in a worker started as a
fresh interpreter (horovodrun's, the TensorFlow launcher's) the hook waits until the script imports torch, at the
script's own moment.
"""

from __future__ import annotations

import functools
import gc
import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

from paratrain.launcher.import_hook import Execute, ImportHook


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the collector off, then freeze everything that exists (what the block made)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
    gc.freeze()


def load_torch() -> ModuleType:
    """The launcher's import of torch (it needs torch to plan and to run torchrun's agent)."""
    if "torch" not in sys.modules:
        with collector_paused():
            importlib.import_module("torch")
    return sys.modules["torch"]


def _paused(execute: Execute, module: ModuleType, after: Callable[[], None] | None = None) -> None:
    with collector_paused():
        execute(module)
    if after is not None:
        after()


_hook = ImportHook("torch", _paused)


def install(after: Callable[[], None] | None = None) -> None:
    """In a worker, before the script runs: the script's `import torch` happens with the collector paused, and
    ``after`` runs once it is loaded — at once when torch is already loaded (a fork of the launcher)."""
    if "torch" in sys.modules:
        if after is not None:
            after()
        return
    _hook.around = functools.partial(_paused, after=after)
    _hook.install()


def uninstall() -> None:
    _hook.uninstall()

