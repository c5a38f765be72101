"""Run code around a module's first import, at the moment the user's script imports it.

A worker must not import torch, TensorFlow or DeepSpeed for the script: a script that sets environment variables
before its own `import` keeps their meaning only if the import happens where the script wrote it. So the worker
puts one :class:`ImportHook` per module in front of ``sys.meta_path``; when the script imports that module, the
hook removes itself, finds the module as Python would, and runs ``around(execute, module)`` in place of the loader's
``exec_module`` — pausing the garbage collector (torch), holding back start-up lines (TensorFlow), or wrapping a
function the script is about to read (DeepSpeed).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

Execute = Callable[[ModuleType], None]
Around = Callable[[Execute, ModuleType], None]


class ImportHook(importlib.abc.MetaPathFinder):
    """Finds ``name`` as Python would and runs its import through ``around``. Used once, then gone.

    It is gone once the module is *executed*, not when it is first looked up: ``importlib.util.find_spec(name)``
    — how a method checks that its package is installed (DeepSpeed's, inside the script's Session) — asks this
    finder too, and a hook that left on that look-up missed the import that came after it.
    """

    def __init__(self, name: str, around: Around) -> None:
        self.name, self.around = name, around

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name != self.name:
            return None
        self.uninstall()  # while Python's own finders look (find_spec below would ask this one again)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.install()
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute, around, hook = spec.loader.exec_module, self.around, self

        def exec_module(module: ModuleType) -> None:
            hook.uninstall()
            around(execute, module)

        # Replaced on this spec's own loader object, not the module's loader class (a deliberate method override).
        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def install(self) -> None:
        """In a worker, before the script runs (nothing to do once the module is imported)."""
        if self.name not in sys.modules and self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
