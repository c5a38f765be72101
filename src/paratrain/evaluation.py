"""Evaluation over ranks: every sample exactly once, every rank in lock-step, results gathered in dataset order.

Why not the training loader: training pads a rank whose chunk is empty with a real sample of loss weight 0 and
may drop a last partial batch — harmless for a gradient, wrong for a metric, which must count every sample once.
Here each rank takes a contiguous share of the dataset (rank r gets ``split_even(range(n), world)[r]``), so the
ranks' outputs concatenated in rank order are the dataset order, as in one process.

Why every rank iterates the same number of batches: under sharded methods (fsdp) each forward all-gathers the
parameters, a collective (so does DDP's forward for a model with buffers, such as BatchNorm's, which it
broadcasts); a rank with one batch fewer would leave the others waiting forever. A rank with fewer
samples than batches gets batches of 0 samples — tensors sliced to ``[:0]``, with the right dtypes and trailing
shapes — which every common layer (Linear, Conv2d, BatchNorm in eval mode, CrossEntropyLoss(reduction="sum"))
accepts, and which count nothing: there are no padding samples to subtract afterwards. A *mean* over 0 samples
is NaN, so sum per rank and divide the all-reduced sum by the all-reduced count.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, IterableDataset

from paratrain.data import split_even, to_device
from paratrain.errors import ConfigError


def plan_eval(n: int, batch_size: int, rank: int, world: int) -> list[list[int]]:
    """This rank's evaluation batches (dataset indices); the same number of them on every rank.

    The count is set by the largest share (rank 0's, ``ceil(n / world)``), at least 1; each rank splits its own
    share into that many contiguous near-even batches, so a smaller share gets smaller (possibly empty) batches
    rather than fewer of them. No batch exceeds ``batch_size``.
    """
    if batch_size < 1:
        raise ConfigError(f"evaluation batch_size must be at least 1 (got {batch_size})")
    shares = split_even(list(range(n)), world)
    count = max(1, max(math.ceil(len(s) / batch_size) for s in shares))
    return split_even(shares[rank], count)


def empty_like_batch(batch: Any) -> Any:
    """The same structure with every tensor sliced to 0 samples (dtype and trailing shape kept).

    A list of strings (what default_collate makes of a string field) becomes an empty list; other non-tensor
    values are kept as they are, so a script must count samples from tensors (``len(y)``), not from them.
    """
    if isinstance(batch, torch.Tensor):
        return batch[:0]
    if isinstance(batch, dict):
        return {k: empty_like_batch(v) for k, v in batch.items()}
    if isinstance(batch, list) and batch and all(isinstance(v, str) for v in batch):
        return []
    if isinstance(batch, (list, tuple)) and not hasattr(batch, "_fields"):
        return type(batch)(empty_like_batch(v) for v in batch)
    if isinstance(batch, tuple):  # namedtuple
        return type(batch)(*(empty_like_batch(v) for v in batch))
    return batch


class EvalLoader:
    """This rank's share of an evaluation DataLoader, in dataset order, moved to the device.

    The loader's shuffle, sampler and drop_last are ignored: evaluation reads the dataset sequentially and keeps
    every sample (a metric does not depend on the order, and sequential order is what makes :meth:`Session.gather`
    return outputs in dataset order). Its ``batch_size`` is read *per rank* — it bounds the memory of one forward
    — while its num_workers, collate_fn and pin_memory still apply. Every rank yields ``len(self)`` batches, some
    possibly of 0 samples (see the module docstring); each ``for`` is a full pass over the share.
    """

    def __init__(self, loader: DataLoader, *, rank: int, world_size: int, device: torch.device) -> None:
        if isinstance(loader.dataset, IterableDataset):
            raise ConfigError("prepare_eval() cannot split an IterableDataset across ranks (it has no indices)",
                              hint="use a map-style Dataset, or shard the stream yourself with session.rank and "
                                   "keep every rank's number of forward passes equal")
        batch_size = loader.batch_size or getattr(loader.batch_sampler, "batch_size", None)
        if not batch_size:
            raise ConfigError("prepare_eval() needs a DataLoader with a batch_size", hint="pass batch_size=...")
        self.loader = loader
        self.batch_size = int(batch_size)
        self.rank, self.world_size, self.device = rank, world_size, device

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    def plan(self) -> list[list[int]]:
        """This rank's batches of dataset indices, planned from the dataset's current length."""
        n = len(self.loader.dataset)
        if n == 0:
            raise ConfigError("the evaluation dataset is empty", hint="give prepare_eval() a loader with samples")
        return plan_eval(n, self.batch_size, self.rank, self.world_size)

    @property
    def indices(self) -> list[int]:
        """The dataset indices this rank evaluates, in the order its batches yield them."""
        return [i for batch in self.plan() for i in batch]

    def __len__(self) -> int:
        return len(self.plan())

    def __iter__(self) -> Iterator[Any]:
        plan = self.plan()
        real = [b for b in plan if b]
        empty = None
        if len(real) < len(plan):  # collated from one real sample, so structure and dtypes match real batches
            first = real[0][0] if real else 0
            sample = self.loader.collate_fn([self.loader.dataset[first]])
            empty = to_device(empty_like_batch(sample), self.device)
        batches = iter(self._inner(real)) if real else iter(())
        for indices in plan:
            yield to_device(next(batches), self.device) if indices else empty

    def _inner(self, batches: list[list[int]]) -> DataLoader:
        """A DataLoader over the planned index lists, with the user's workers, collate_fn and pinning."""
        src = self.loader
        kwargs: dict[str, Any] = {}
        if src.num_workers > 0:
            kwargs = {"prefetch_factor": src.prefetch_factor, "persistent_workers": False,
                      "multiprocessing_context": src.multiprocessing_context}
        return DataLoader(src.dataset, batch_sampler=batches, num_workers=src.num_workers,
                          collate_fn=src.collate_fn, pin_memory=src.pin_memory, timeout=src.timeout,
                          worker_init_fn=src.worker_init_fn, **kwargs)


def gather(tensor: torch.Tensor, *, world_size: int, device: torch.device, group: Any = None) -> torch.Tensor:
    """Concatenate every rank's ``tensor`` along dim 0, in rank order, on every rank (detached). ``group`` is the
    process group of ``world_size`` ranks to gather over (None: every rank).

    dim 0 may differ per rank (an uneven share, an empty batch); the sizes are all-gathered first, each rank pads
    to the largest, all_gather, then the padding is trimmed. A 0-dim tensor counts as 1 element. Trailing shape
    and dtype must agree on every rank: they travel with the sizes (as a checksum), so a mismatch is raised on
    every rank alike instead of hanging or mixing bytes. ``device`` is where the collective runs (the session's
    device: NCCL needs CUDA tensors); the result is on the tensor's own device.
    """
    local = tensor.detach()
    if local.dim() == 0:
        local = local.reshape(1)
    if world_size == 1 or not dist.is_initialized():
        return local
    home = local.device
    trailing = tuple(local.shape[1:])
    key = zlib.crc32(f"{local.dtype}{trailing}".encode())
    meta = torch.tensor([local.shape[0], key], dtype=torch.int64, device=device)
    metas = [torch.empty_like(meta) for _ in range(world_size)]
    dist.all_gather(metas, meta, group=group)
    sizes = [int(m[0]) for m in metas]
    if len({int(m[1]) for m in metas}) > 1:
        raise ConfigError(f"session.gather() got tensors of different trailing shape or dtype on different ranks "
                          f"(rank-local: {local.dtype}, trailing shape {list(trailing)})",
                          hint="only dim 0 may differ between ranks")
    most = max(sizes)
    if most == 0:
        return local
    padded = local.to(device).contiguous()  # all_gather's buffers are allocated like it: contiguous
    if padded.shape[0] < most:
        padded = torch.cat([padded, padded.new_zeros((most - padded.shape[0], *trailing))])
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:s] for p, s in zip(parts, sizes, strict=True)]).to(home)
