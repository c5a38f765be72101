"""Checkpoints in one format for every torch method, written atomically.

Model and optimizer state go through ``torch.distributed.checkpoint`` keyed by parameter name, so a checkpoint
written by N ranks of one method (sharded or not) loads on M ranks of another. Loop state (optimizer-step count,
loader position, scheduler) and per-rank RNG states are small ``torch.save`` files read back with
``weights_only=True``. Everything is written into a temporary sibling directory and renamed into place, so a crash
mid-save leaves the previous checkpoint intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from paratrain.errors import CheckpointError
from paratrain.strategies.base import Strategy

FORMAT = "paratrain-checkpoint/1"
META = "paratrain.json"
TRAINER = "trainer_state.pt"


def _dist() -> bool:
    return dist.is_available() and dist.is_initialized()


def _rank() -> int:
    return dist.get_rank() if _dist() else 0


def _barrier() -> None:
    if _dist():
        dist.barrier()


@contextlib.contextmanager
def _single_process_quiet() -> Iterator[None]:
    """DCP warns that it assumes one process when no process group exists; that is exactly the intent here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to (save|load) in a single process.*")
        yield


def _fsync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as fh:
                os.fsync(fh.fileno())
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1])}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def _is_own(name: str) -> bool:
    """Files a paratrain checkpoint consists of (DCP shards and metadata, our loop state and RNG states)."""
    return name.endswith(".distcp") or name in {".metadata", META, TRAINER, "rng"}


def _check_target(final: Path) -> None:
    """Refuse to replace anything that is not wholly a previous checkpoint: a user's files are never lost."""
    if not final.exists():
        return
    if not final.is_dir():
        raise CheckpointError(f"{final} is a file; refusing to overwrite it", hint="choose a new directory")
    entries = [e.name for e in final.iterdir()]
    if entries and META not in entries:
        raise CheckpointError(f"{final} exists and is not a paratrain checkpoint; refusing to overwrite it",
                              hint="choose an empty or new directory")
    foreign = sorted(e for e in entries if not _is_own(e))
    if foreign:
        raise CheckpointError(f"{final} holds files that are not part of its checkpoint ({', '.join(foreign[:5])}); "
                              "refusing to replace it", hint="move them out, or save to a new directory")


def save(path: str | os.PathLike, strategy: Strategy, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer | None, trainer_state: dict[str, Any]) -> Path:
    import torch.distributed.checkpoint as dcp

    final = Path(path).resolve()
    _check_target(final)
    tmp = final.with_name(f".{final.name}.tmp")
    if _rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier()
    try:
        # torch fills an optimizer that has not stepped yet with a zero step's state before it can be saved; that
        # state must not stay behind (AdamW would count one step too many), here or in the loaded copy.
        had_state = optimizer is not None and bool(optimizer.state)
        state = strategy.state_dict(model, optimizer)
        if optimizer is not None and not had_state:
            strategy.clear_optimizer_state(optimizer)
        with _single_process_quiet():
            dcp.save(state, checkpoint_id=str(tmp))
        (tmp / "rng").mkdir(exist_ok=True)
        torch.save(_rng_state(), tmp / "rng" / f"rank{_rank()}.pt")
        _barrier()
        if _rank() == 0:
            torch.save(trainer_state, tmp / TRAINER)
            meta = {"format": FORMAT, "strategy": strategy.spec, "world_size": strategy.world_size,
                    "step_count": trainer_state.get("step_count", 0), "optimizer_state": had_state,
                    "torch": torch.__version__}
            (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
            _fsync_tree(tmp)
            _swap_into_place(tmp, final)
    except BaseException as exc:
        if _rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # the previous checkpoint, if any, is untouched
        if isinstance(exc, (OSError, _dcp_error())):  # disk full, quota, permissions
            kept = "; the previous checkpoint there is intact" if final.exists() else ""
            raise CheckpointError(f"could not write checkpoint {final}: {_last_line(exc)}{kept}",
                                  hint="free disk space or save somewhere else") from None
        raise
    _barrier()
    return final


def _swap_into_place(tmp: Path, final: Path) -> None:
    """Rename the finished checkpoint into place. The old one is kept as .NAME.old until the new one is there."""
    old = final.with_name(f".{final.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    folder = Path(path)
    meta = folder / META
    if not meta.is_file():
        old = folder.with_name(f".{folder.name}.old")
        extra = f" (a previous save was interrupted; the last good one is in {old})" if old.exists() else ""
        raise CheckpointError(f"{folder} is not a paratrain checkpoint: {META} is missing{extra}",
                              hint="pass the directory given to session.save()")
    data = json.loads(meta.read_text())
    if data.get("format") != FORMAT:
        raise CheckpointError(f"{folder} has format {data.get('format')!r}; this paratrain reads {FORMAT}")
    return data


class _MetadataUnpickler(pickle.Unpickler):
    """Reads DCP's ``.metadata`` pickle allowing only the classes a checkpoint index is made of.

    torch.distributed.checkpoint reads that file with plain ``pickle.load``, which would run any code a crafted
    file names; so paratrain reads it this way first, and refuses a file that names anything else.
    """

    _MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
    _NAMES = frozenset({("torch", "Size"), ("torch.serialization", "_get_layout"), ("collections", "OrderedDict"),
                        ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("pathlib", "WindowsPath"),
                        ("pathlib", "PureWindowsPath")})

    def find_class(self, module: str, name: str) -> Any:
        ok = (module in self._MODULES and not name.startswith("__")) or (module, name) in self._NAMES
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            ok = True
        if not ok:
            raise pickle.UnpicklingError(f"{module}.{name} is not part of a checkpoint index")
        return super().find_class(module, name)


def _stored(folder: Path) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp

    index = folder / ".metadata"
    try:
        with open(index, "rb") as fh:
            _MetadataUnpickler(fh).load()
    except pickle.UnpicklingError as exc:
        raise CheckpointError(f"refusing to load {folder}: its index {index.name} could run code ({exc})",
                              hint="load only checkpoints written by paratrain.Session.save") from None
    except (OSError, EOFError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {folder} is damaged: cannot read {index.name} ({exc or type(exc).__name__})",
                              hint="load an earlier checkpoint") from None
    return dcp.FileSystemReader(str(folder)).read_metadata().state_dict_metadata


def _dcp_error() -> type[Exception]:
    """torch.distributed.checkpoint's error type, imported only when needed: the package pulls in DTensor (≈0.7 s
    of start-up here) which single-process and DDP scripts never use otherwise."""
    from torch.distributed.checkpoint.api import CheckpointException

    return CheckpointException


def _last_line(exc: BaseException) -> str:
    """The line of an error worth showing: DCP wraps the per-rank error in a CheckpointException whose last line
    is the real one."""
    text = str(exc).strip()
    return text.splitlines()[-1].strip() if text else type(exc).__name__


def _read(what: str, folder: Path, load: Any) -> Any:
    """Run one read of a checkpoint; a damaged or unsafe file becomes a CheckpointError naming the checkpoint."""
    try:
        return load()
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if "Unsupported global" in ln]
        why = f" ({lines[0].split(': ', 1)[-1]})" if lines else ""
        raise CheckpointError(f"refusing to load {what} of {folder}: it holds objects that could run code{why}",
                              hint="load only checkpoints written by paratrain.Session.save") from None
    except (OSError, EOFError, RuntimeError, ValueError, _dcp_error()) as exc:
        raise CheckpointError(f"checkpoint {folder} is damaged: cannot read {what} ({_last_line(exc)})",
                              hint="load an earlier checkpoint") from None


def _check_compatible(folder: Path, expected: dict[str, Any], strategy: Strategy) -> None:
    """Compare parameter names and shapes before loading, so a wrong model gets a readable list, not a trace."""

    have = {k[len("model."):]: v for k, v in _stored(folder).items() if k.startswith("model.")}
    want = expected["model"]
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - strategy.model_keys(list(want)))  # a pipeline stage holds some keys only
    wrong = sorted(k for k in set(want) & set(have)
                   if hasattr(have[k], "size") and isinstance(want[k], torch.Tensor)
                   and tuple(have[k].size) != tuple(want[k].shape))
    if missing or unexpected or wrong:
        parts = []
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("shape differs", wrong)):
            if keys:
                more = f" (+{len(keys) - 5} more)" if len(keys) > 5 else ""
                parts.append(f"{label}: {', '.join(keys[:5])}{more}")
        raise CheckpointError(f"checkpoint {folder} does not fit this model; " + "; ".join(parts),
                              hint="load it into the same model architecture it was saved from")


def load(path: str | os.PathLike, strategy: Strategy, model: torch.nn.Module,
         optimizer: torch.optim.Optimizer | None) -> dict[str, Any]:
    """Load model/optimizer in place and return the trainer state (step count, loader, scheduler)."""
    import torch.distributed.checkpoint as dcp

    folder = Path(path).resolve()
    meta = read_meta(folder)
    if not any(k.startswith("optim.") for k in _stored(folder)):
        optimizer = None  # saved without an optimizer: leave the one given here as it is
    state = strategy.state_dict(model, optimizer)
    _check_compatible(folder, state, strategy)
    if optimizer is None:
        state.pop("optim", None)
    with _single_process_quiet():
        _read("its model/optimizer shards", folder, lambda: dcp.load(state, checkpoint_id=str(folder)))
    strategy.load_state_dict(model, optimizer, state)
    if optimizer is not None and meta.get("optimizer_state") is False:
        strategy.clear_optimizer_state(optimizer)  # saved before the first step: hyper-parameters only
    rng_file = folder / "rng" / f"rank{_rank()}.pt"
    if not rng_file.exists():
        rng_file = folder / "rng" / "rank0.pt"
    if rng_file.exists():
        _set_rng_state(_read(f"rng/{rng_file.name}", folder, lambda: torch.load(rng_file, weights_only=True)))
    return _read(TRAINER, folder, lambda: torch.load(folder / TRAINER, weights_only=True))
