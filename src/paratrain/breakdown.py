"""Where a training step's communication time goes, read from torch profiler events of a few steps.

The collectives a backend really runs appear as ``gloo:<op>`` / ``nccl:<op>`` events (gloo's on its own worker
threads; NCCL's kernels as device events), whatever issued them — DDP's reducer, FSDP's hooks or the script. Their
union over time is the communication time; the part of it during which this process's main thread was computing
(top-level ``aten::`` ops) was hidden behind compute ("overlapped"); the rest was waited for ("exposed"). Bytes
sent per rank follow the ring algorithms both backends use: an all-reduce sends 2(N−1)/N of its buffer, an
all-gather (N−1) inputs, a reduce-scatter (N−1)/N of its input; a point-to-point send (between pipeline stages) its
payload once. They are also counted by kind of collective.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

COMM = re.compile(r"^(gloo|nccl):(\w+)")
DEVICE_COMM = re.compile(r"^nccl\w*kernel", re.IGNORECASE)
DTYPE_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4,
               "signed char": 1, "unsigned char": 1, "bool": 1, "short int": 2}


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def sent_bytes(op: str, shapes: list[list[int]], dtypes: list[str], world: int) -> int:
    """Bytes one rank sends for one collective, by the ring algorithm's accounting."""
    if world < 2 or not shapes or not shapes[0]:
        return 0
    payload = math.prod(shapes[0]) * DTYPE_BYTES.get(dtypes[0] if dtypes else "float", 4)
    if op == "send":  # point to point (pipeline stages): the payload crosses one link, once
        return payload
    if op == "recv":  # counted by the rank that sent it
        return 0
    if "all_reduce" in op or "allreduce" in op:
        return round(payload * 2 * (world - 1) / world)
    if "all_gather" in op or "allgather" in op:
        return payload * (world - 1)
    if "reduce_scatter" in op:
        return round(payload * (world - 1) / world)
    return round(payload * (world - 1) / world)  # broadcast and the rest: each byte crosses each link once


def analyse(events: Iterable[Any], world: int, steps: int) -> dict[str, Any]:
    """Per-step communication figures from profiler ``FunctionEvent``s covering ``steps`` whole steps."""
    comm, compute_by_thread = [], {}
    sent, ops, kinds = 0, {}, {}
    for e in events:
        start, end = e.time_range.start, e.time_range.end
        match = COMM.match(e.name)
        if match:
            comm.append((start, end))
            shapes = [list(s) for s in (e.input_shapes or []) if isinstance(s, (list, tuple))]
            dtypes = list(getattr(e, "input_dtypes", None) or [])
            moved = sent_bytes(match.group(2), shapes, dtypes, world)
            sent += moved
            kinds[match.group(2)] = kinds.get(match.group(2), 0) + moved
            ops[match.group(2)] = ops.get(match.group(2), 0) + 1
        elif DEVICE_COMM.match(e.name):
            comm.append((start, end))
        elif e.name.startswith("aten::") and getattr(e, "cpu_parent", None) is None:
            compute_by_thread.setdefault(e.thread, []).append((start, end))
    main = max(compute_by_thread, key=lambda t: _length(_union(compute_by_thread[t])), default=None)
    comm_union = _union(comm)
    compute = _union(compute_by_thread.get(main, []))
    total = _length(comm_union)
    overlapped = _intersection(comm_union, compute)
    per = max(steps, 1) * 1e6  # microseconds -> seconds per step
    return {"comm_total_s": total / per, "comm_exposed_s": max(0.0, total - overlapped) / per,
            "comm_overlapped_s": overlapped / per, "comm_bytes_per_step": round(sent / max(steps, 1)),
            "collectives_per_step": {k: v / max(steps, 1) for k, v in sorted(ops.items())},
            "comm_bytes_by_kind": {k: round(v / max(steps, 1)) for k, v in sorted(kinds.items()) if v}}


COMM_KEYS = ("comm_total_s", "comm_exposed_s", "comm_overlapped_s", "comm_bytes_per_step", "collectives_per_step",
             "comm_bytes_by_kind")


def not_measured(result: dict[str, Any]) -> dict[str, Any]:
    """The profile of a method whose collectives the torch profiler cannot see (Horovod runs them in its own C++
    thread): its communication is unknown — None, shown as "not measured" — never the 0 MB and 0 % it would read."""
    return {**result, **dict.fromkeys(COMM_KEYS), "comm_measured": False}
