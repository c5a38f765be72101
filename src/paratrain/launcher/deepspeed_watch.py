"""What a script's own ``deepspeed.initialize`` ran, noted for the launcher.

A script written for the ``deepspeed`` launcher passes its own config to ``deepspeed.initialize``; the options of
``--strategy deepspeed:…`` (stage, offload, ``config=``) only shape the config paratrain gives a Session. Before,
``paratrain run -s deepspeed:zero1 script.py --zero 3`` trained ZeRO-3 and its last line said ``zero_stage=1``.
So under the deepspeed method every worker watches ``deepspeed.initialize``: when the script (not the Session)
calls it, the worker notes what the engine it got runs — ZeRO stage, offload, clipping — and the launcher says
which config won and reports the stage that ran. It also turns off the nested-tensor packing ZeRO-3's hooks break,
as the Session does for its own engine (:mod:`paratrain.fastpath`).

The hook waits for the script's own ``import deepspeed`` (deepspeed is never imported for it, so a script that sets
variables first keeps its meaning), then replaces the module's ``initialize`` with a wrapper, before the script can
read it (``from deepspeed import initialize`` gets the wrapper too).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from paratrain.launcher import built
from paratrain.launcher.import_hook import Execute, ImportHook

Facts = dict[str, Any]
_local = threading.local()  # .session: a Session's own call (DeepSpeedStrategy.wrap), which is not the script's


@contextlib.contextmanager
def session_call() -> Iterator[None]:
    """Around the Session's own ``deepspeed.initialize``: its config is paratrain's, nothing to report."""
    _local.session = True
    try:
        yield
    finally:
        _local.session = False


def engine_facts(engine: Any) -> Facts:
    """What the engine runs, in the words of paratrain's options (``zero_stage``, ``offload``)."""
    facts: Facts = {"zero_stage": int(engine.zero_optimization_stage())}
    offload = "none"
    if _offloaded(engine.zero_offload_optimizer()):
        offload = "optimizer"
    if _offloaded(engine.zero_offload_param()):
        offload = "all"
    facts["offload"] = offload
    with contextlib.suppress(Exception):
        facts["gradient_clipping"] = float(engine.gradient_clipping())
    return facts


def _offloaded(config: Any) -> bool:
    device = getattr(config, "device", None)
    return str(getattr(device, "value", device) or "none") not in ("none", "None")


def watched(initialize: Callable[..., Any], report: Callable[[Facts], object]) -> Callable[..., Any]:
    """``initialize`` that reports what the engine it built runs (a failure to read it never fails the script)."""

    @functools.wraps(initialize)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = initialize(*args, **kwargs)
        built.mark(built.DEEPSPEED)  # an engine was built, the Session's or the script's (the job's last line)
        if not getattr(_local, "session", False):
            with contextlib.suppress(Exception):
                report(engine_facts(result[0]))
            _serve_the_fast_path(result[0])
        return result

    return wrapper


def _serve_the_fast_path(engine: Any) -> None:
    """What the Session does for its own engine: ZeRO-3's hooks on a stock ``nn.TransformerEncoder``'s attention
    break torch's nested-tensor fast path at the first evaluation with a padding mask (``MultiheadAttention does
    not support NestedTensor outside of its fast path``); the packing is turned off there, with one notice."""
    from paratrain import fastpath
    from paratrain.console import notice

    module = getattr(engine, "module", None)
    if module is not None and (names := fastpath.turn_off_nested_tensor(module)):
        notice(fastpath.turned_off_notice("deepspeed", names))


def _watched_import(execute: Execute, module: ModuleType, report: Callable[[Facts], object]) -> None:
    """The import, then ``initialize`` replaced before the script can read it."""
    execute(module)
    if callable(getattr(module, "initialize", None)):
        # typeshed's ModuleType has __getattr__ but no __setattr__: a write to a module attribute needs the ignore
        module.initialize = watched(module.initialize, report)  # type: ignore[attr-defined]


_hook = ImportHook("deepspeed", lambda execute, module: execute(module))


def install(report: Callable[[Facts], object]) -> None:
    """In a worker, before the script runs."""
    uninstall()
    if "deepspeed" in sys.modules:  # already imported (not in a fresh worker): wrap it now
        module = sys.modules["deepspeed"]
        # typeshed's ModuleType has __getattr__ but no __setattr__: a write to a module attribute needs the ignore
        module.initialize = watched(module.initialize, report)  # type: ignore[attr-defined]
        return
    _hook.around = functools.partial(_watched_import, report=report)
    _hook.install()


def uninstall() -> None:
    _hook.uninstall()
