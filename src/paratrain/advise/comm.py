"""Bytes each rank sends per optimizer step, and how long that takes on a given link.

Ring collectives (NCCL's and gloo's large-message algorithm) send (N−1)/N of the buffer per rank for a
reduce-scatter or an all-gather, twice that for an all-reduce — so data parallelism costs 2Ψ(N−1)/N gradient bytes
per step whatever N is, ZeRO-1/2 the same (reduce-scatter gradients, all-gather updated parameters), and ZeRO-3 /
FSDP ``full`` ≈ 3Ψ (parameters gathered again for backward). DataParallel is not a ring: GPU 0 copies the
parameters to every replica and gathers every gradient and output back, so its traffic grows with N.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

from paratrain.errors import ConfigError

# Achievable bus bandwidth in GB/s (1e9 bytes) — typical figures, not peaks: NVLink 3/4 all-reduce in nccl-tests,
# PCIe 4.0 x16 between GPUs without NVLink, InfiniBand HDR, and 10 Gb Ethernet.
LINKS = {"nvlink": 150.0, "pcie": 12.0, "infiniband": 20.0, "ethernet": 1.2}
HOST_LINK = "pcie"  # offloaded state crosses PCIe between host and GPU


@dataclass(frozen=True)
class Link:
    name: str
    gbps: float  # GB/s

    @property
    def bytes_per_s(self) -> float:
        return self.gbps * 1e9


def parse_link(text: str) -> Link:
    """``nvlink``/``pcie``/``infiniband``/``ethernet`` or a number of GB/s."""
    key = text.strip().lower()
    if key in LINKS:
        return Link(key, LINKS[key])
    try:
        value = float(key.removesuffix("gb/s").removesuffix("gbps"))
    except ValueError:
        raise ConfigError(f'--interconnect "{text}" is not a link name or a bandwidth',
                          hint=f"use one of {', '.join(LINKS)} or a number of GB/s, e.g. 25") from None
    if not 0 < value < 10_000:
        raise ConfigError(f"--interconnect {value:g} GB/s is not a plausible bandwidth",
                          hint="give GB/s between 0 and 10000, e.g. 25")
    return Link(f"{value:g} GB/s", value)


def step_bytes(pattern: str, params: int, ranks: int, param_bytes: int, grad_bytes: int,
               output_bytes: int = 0, block_io_bytes: int = 0) -> int:
    """Bytes one rank sends per optimizer step (for DataParallel: what passes through GPU 0). ``block_io_bytes``:
    one micro-batch's block outputs over all blocks (layers × batch × sequence × hidden), which tensor parallelism
    all-reduces twice per block forward (after attention and after the MLP) and twice backward; for pipeline
    parallelism, what the busiest stage sends its neighbours (activations forward, gradients back)."""
    if ranks < 2 or pattern == "none":
        return 0
    ring = (ranks - 1) / ranks
    if pattern == "allreduce":
        return round(2 * params * grad_bytes * ring)
    if pattern == "shard_grads":  # reduce-scatter gradients, all-gather parameters once
        return round(params * (grad_bytes + param_bytes) * ring)
    if pattern == "shard_all":  # all-gather for forward and again for backward, reduce-scatter gradients
        return round(params * (grad_bytes + 2 * param_bytes) * ring)
    if pattern == "tp":
        return round(4 * block_io_bytes * 2 * ring)
    if pattern == "pp":  # a stage's output forward and its input's gradient back, once per sample: point to point
        return block_io_bytes
    if pattern == "dp":  # parameters out to N-1 replicas, gradients and outputs back to GPU 0
        return (params * (param_bytes + grad_bytes) + output_bytes) * (ranks - 1)
    raise ValueError(pattern)


def host_bytes(offload: tuple[str, ...], params: int, ranks: int, param_bytes: int, grad_bytes: int) -> int:
    """Bytes crossing host↔GPU per step for offloaded state: gradients down and updated parameters up; offloaded
    parameters also come up for forward and for backward."""
    if not offload:
        return 0
    shard = params / max(ranks, 1)
    moved = shard * (grad_bytes + param_bytes)
    if "params" in offload:
        moved += 2 * shard * param_bytes
    return round(moved)


def seconds(link_bytes: int, host: int, link: Link) -> float:
    return link_bytes / link.bytes_per_s + host / (LINKS[HOST_LINK] * 1e9)


def probe(nproc: int = 2, megabytes: int = 64, timeout: float = 120.0) -> Link:
    """Measure all-reduce bus bandwidth among ``nproc`` local processes (NCCL on GPUs, gloo on CPUs).

    Runs :mod:`paratrain.advise.probe_worker` under torchrun, as a real job would; the figure is nccl-tests'
    "bus bandwidth" (bytes × 2(N−1)/N per second), the quantity the step estimates divide by.
    """
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "paratrain.advise.probe_worker", str(megabytes)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"the all-reduce probe did not finish in {timeout:.0f} s",
                          hint="give the bandwidth instead, e.g. --interconnect pcie") from None
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"the all-reduce probe failed ({tail})", hint="give --interconnect instead")
    result = json.loads(lines[-1])
    return Link(f"measured ({result['backend']}, {nproc} processes)", result["bus_gbps"])
