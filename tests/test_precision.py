"""Mixed precision's autocast under activation checkpointing: the 16-bit weight copies autocast caches are not kept
through forward (paratrain.precision.apply's ``cache``), so checkpointing saves what it promises."""

from __future__ import annotations

import torch
from torch import nn

import paratrain as pt
from paratrain.tensor_peak import peak_above_window_start

WIDTH, BLOCKS = 512, 6


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(WIDTH, WIDTH, bias=False), nn.GELU())
                                    for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return x


def _forward_peak(checkpointing: bool) -> int:
    torch.manual_seed(0)
    session = pt.Session(precision="bf16-mixed", activation_checkpointing=checkpointing)
    model, _ = session.prepare(Blocks(), torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1))[:2]
    x = torch.randn(4, WIDTH)
    model(x)  # a first forward: whatever is allocated once is allocated
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        model(x).sum()
    session.close()
    peak = peak_above_window_start(prof)
    assert peak is not None
    return peak


def test_checkpointed_forward_does_not_keep_every_weights_16_bit_copy():
    """Each block's bf16 weight (0.5 MiB) is cast, used and freed: the forward's peak stays below what holding all
    six copies would take. With autocast's cache it held them all until forward returned."""
    weight_bf16 = WIDTH * WIDTH * 2
    assert _forward_peak(checkpointing=True) < 3 * weight_bf16
    assert _forward_peak(checkpointing=False) >= BLOCKS * weight_bf16  # stored: autograd keeps every copy anyway
