"""`paratrain run`: build the launch for a method, run it, turn failures into one readable error.

Names are imported lazily: every worker process imports ``paratrain.launcher.worker``, and should not pay for the
launcher's own modules (rich's console alone is ≈0.1 s of start-up per process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from paratrain.launcher.config import RunConfig, load_config
    from paratrain.launcher.plan import LaunchPlan, build_plan, execute

__all__ = ["LaunchPlan", "RunConfig", "build_plan", "execute", "load_config"]
_HOME = {"RunConfig": "config", "load_config": "config", "LaunchPlan": "plan", "build_plan": "plan",
         "execute": "plan"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"paratrain.launcher.{_HOME[name]}"), name)
    raise AttributeError(f"module 'paratrain.launcher' has no attribute {name!r}")
