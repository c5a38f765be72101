"""The data-parallel view of a method whose ranks together hold one model (tp, pp): every rank reads the whole batch,
and the Session's loader split, all_reduce, gather and evaluation go over this rank alone."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist


class OneReplica:
    """Mixin, listed before ``Strategy``: data-parallel rank 0 of 1, in a group of this rank alone."""

    _group: Any = None

    def join_one_replica(self) -> None:
        """Call in ``setup()`` after joining the process group: every rank creates every group of one."""
        self._group, _ = dist.new_subgroups(group_size=1)

    @property
    def data_parallel_rank(self) -> int:
        return 0

    @property
    def data_parallel_size(self) -> int:
        return 1

    @property
    def data_parallel_group(self) -> Any:
        return self._group
