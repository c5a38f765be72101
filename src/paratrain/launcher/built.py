"""What a worker's script really built of a method — a DistributedDataParallel, an FSDP module, a DeepSpeed engine —
so that the job's last line says what ran, not what ``--strategy`` asked for.

``--strategy ddp`` starts a plain ``torch.distributed`` script under torchrun unchanged; whether DDP then trains is the
script's doing (a Session's ``prepare`` or its own ``DistributedDataParallel(model)``). A script that only calls
``dist.all_reduce``, or splits its model by hand, never builds one, and "ddp × 2 processes" would misreport it. So
every worker watches, from before the script runs, for the objects the methods are made of, whoever builds them:

- ``DistributedDataParallel``: its ``__init__`` is wrapped (after it returns, so a failed construction counts for
  nothing) — DDP's Python constructor reports nothing of its own a listener could hear;
- FSDP (``fully_shard``, ``FullyShardedDataParallel``): torch's own API-usage log, ``torch._C._log_api_usage_once``,
  which both call with a ``torch.distributed.fsdp`` key on every construction, gets a listener in front of it;
- a DeepSpeed engine: :mod:`.deepspeed_watch` marks every ``deepspeed.initialize`` (the Session's and the script's).

torch is watched once it is loaded: at once in a fork of the launcher, else when the script imports it (the worker
hands :func:`watch_torch` to :mod:`.torch_import`'s hook). The finished rank's "done" note carries :func:`names` and
the process group's backend; the launcher reads them with :func:`launch_only`. This module imports nothing heavy:
the worker imports it up front.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path
from typing import Any

DDP, FSDP, DEEPSPEED = "ddp", "fsdp", "deepspeed"
WHAT = {DDP: "DistributedDataParallel", FSDP: "FSDP module", DEEPSPEED: "DeepSpeed engine"}
_built: set[str] = set()


def mark(name: str) -> None:
    _built.add(name)


def names() -> list[str]:
    """What this process built so far (:data:`WHAT`'s keys)."""
    return sorted(_built)


def backend() -> str | None:
    """The backend of the process group the script joined (gloo, nccl, …), read from the loaded module, or None."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if c10d is None:
        return None
    with contextlib.suppress(Exception):
        if c10d.is_initialized():
            return str(c10d.get_backend())
    with contextlib.suppress(Exception):  # a group the script destroyed: torch keeps its last default backend
        return str(c10d._backend) if getattr(c10d, "_backend", None) else None
    return None


def watch_torch() -> None:
    """Watch for DDP and FSDP from now on (torch is loaded). Idempotent."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    init = DistributedDataParallel.__init__
    if not getattr(init, "_paratrain_watch", False):
        @functools.wraps(init)
        def watched_init(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            mark(DDP)

        watched_init._paratrain_watch = True  # type: ignore[attr-defined]
        DistributedDataParallel.__init__ = watched_init  # type: ignore[method-assign]
    log = torch._C._log_api_usage_once
    if not getattr(log, "_paratrain_watch", False):
        def listener(key: str) -> None:
            if key.startswith("torch.distributed.fsdp"):
                mark(FSDP)
            log(key)

        listener._paratrain_watch = True  # type: ignore[attr-defined]
        torch._C._log_api_usage_once = listener  # type: ignore[assignment]  # same call, a listener in front


def launch_only(marker: str, requested: str, notes: Path) -> tuple[str, str] | None:
    """When no rank of this node built ``marker`` (every rank's done note says what it built), what ran instead and
    why the method did not apply: ``("torch.distributed (gloo)", "no DistributedDataParallel was built, so
    --strategy ddp applied only the launch")``; else None."""
    from paratrain.launcher import notes as notes_

    done = notes_.by_rank(notes, "done")
    if not done or not all(isinstance(d.get("built"), list) for d in done.values()):
        return None  # a rank that said nothing of it (another launcher's worker): no claim either way
    seen: list[list[str]] = [d["built"] for d in done.values()]
    if any(marker in b for b in seen):
        return None
    others = sorted({name for b in seen for name in b if name in WHAT})
    backends = sorted({str(d["backend"]) for d in done.values() if d.get("backend")})
    ran = (", ".join(f"{name} (the script's own {WHAT[name]})" for name in others) if others
           else f"torch.distributed ({'/'.join(backends)})" if backends else "torch.distributed")
    return ran, f"no {WHAT[marker]} was built, so --strategy {requested.strip()} applied only the launch"
