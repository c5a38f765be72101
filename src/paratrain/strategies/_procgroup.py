"""Joining and leaving the default process group, shared by every torchrun-launched method."""

from __future__ import annotations

import contextlib
import datetime

import torch
import torch.distributed as dist

from paratrain import exiting
from paratrain.distenv import DistEnv
from paratrain.errors import LaunchError


def pick_device(env: DistEnv) -> torch.device:
    if torch.cuda.is_available():
        if env.local_rank >= torch.cuda.device_count():
            raise LaunchError(
                f"local rank {env.local_rank} has no GPU: only {torch.cuda.device_count()} visible",
                hint=f"use --nproc {torch.cuda.device_count()} or fewer per node",
            )
        return torch.device("cuda", env.local_rank)
    return torch.device("cpu")


def join(env: DistEnv, method: str) -> torch.device:
    """Init the default process group from the launcher's environment: nccl on GPUs, gloo on CPU.

    A process that was launched for a distributed run but cannot join fails here, loudly, instead of training an
    independent copy of the model.
    """
    device = pick_device(env)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():
        return device
    if not env.launched:
        raise LaunchError(
            f"strategy {method} needs a launcher (RANK/WORLD_SIZE are not set)",
            hint=f"run it as `paratrain run --strategy {method} --nproc 2 SCRIPT`",
        )
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=env.timeout_s) if env.timeout_s else None  # None: torch's default
    try:
        dist.init_process_group(backend=backend, timeout=timeout)
    except Exception as exc:
        raise LaunchError(
            f"rank {env.rank} of {env.world_size} could not join the {backend} process group "
            f"at {env.master or 'MASTER_ADDR:MASTER_PORT'}: {exc}",
            hint="check that every rank uses the same --master and that the port is reachable",
        ) from exc
    if dist.get_world_size() != env.world_size:
        raise LaunchError(f"process group has {dist.get_world_size()} ranks, expected {env.world_size}")
    return device


def mark_failing() -> None:
    """This process is exiting because of an error: leave without waiting for the other ranks."""
    exiting.mark_failing()


def is_failing() -> bool:
    return exiting.is_failing()


def leave(timeout_s: float | None = None) -> None:
    """Destroy the process group — after a last barrier on a normal exit.

    Without the barrier a rank that finishes first tears its group down while another is still using its end
    (seen here as an intermittent C++ abort at exit under load). On an error exit there is no barrier: the other
    ranks may be stuck waiting for this one, and the launcher must see it exit.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if not exiting.is_failing():
        with contextlib.suppress(Exception):  # a peer already gone: nothing left to wait for
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s or 60))
            else:
                dist.barrier()
    dist.destroy_process_group()
