"""One rank of ``paratrain advise --probe``: time all-reduces of one buffer and print the bus bandwidth (rank 0).

Started by torchrun (see :func:`paratrain.advise.comm.probe`); the argument is the buffer size in MB.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist


def main(megabytes: int) -> None:
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    buf = torch.ones(megabytes * 1_000_000 // 4, device=device)
    dist.all_reduce(buf)  # warm-up: connections and allocations
    times = []
    for _ in range(5):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(buf)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    best = sorted(times)[len(times) // 2]  # median: one slow round on a shared machine is not the link
    bus = buf.numel() * 4 * 2 * (world - 1) / world / best / 1e9
    if rank == 0:
        print(json.dumps({"backend": backend, "ranks": world, "bus_gbps": bus, "seconds": best}), flush=True)
    dist.monitored_barrier() if backend == "gloo" else dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64)
