"""A small language model built inside ``session.init_module()`` (or not, with --eager), trained or only prepared.

It carries the traps of deferred initialisation: a non-persistent buffer computed in ``__init__`` (a sinusoidal
position table, absent from the state dict), an output head tied to the embedding, a parent initialising its
children's parameters (GPT-style ``self.apply(init)``, and ``nn.MultiheadAttention`` zeroing its output bias),
LayerNorm and attention.
Writes ``losses.json`` (rank 0) and ``setup-rank<R>.json``: the rank's RSS high-water mark above its RSS just
before the model is built — once built (``build_peak_bytes``) and after ``prepare`` (``setup_peak_bytes``) —, the
bytes of its parameters then, of the whole model and of its largest block. (The RSS, not torch's profiler: the
profiler misses a tensor freed on a communication thread, and would count it as held.) What prepare() imports is
imported before the start, so that loading code is not counted as the model's memory.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
from pathlib import Path

import torch
from torch import nn

import paratrain as pt
from paratrain import metrics


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(h)
        h = h + self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return h + self.mlp(self.norm2(h))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, dim: int, depth: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        position = torch.arange(seq).unsqueeze(1)
        freq = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(seq, dim)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * freq), torch.cos(position * freq)
        self.register_buffer("pos", table, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        mask = torch.triu(torch.full((length, length), float("-inf"), device=tokens.device), diagonal=1)
        h = self.embed(tokens) + self.pos[:length]
        for block in self.blocks:
            h = block(h, mask)
        return self.head(self.norm(h))


def _bytes(tensors) -> int:
    """Bytes of these parameters, whole (a ZeRO-3 partitioned parameter's own numel is 0: its ds_numel counts)."""
    return sum(getattr(t, "ds_numel", t.numel()) * t.element_size() for t in tensors)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eager", action="store_true", help="build the model outside init_module()")
    parser.add_argument("--load", help="a state_dict to load into the model before prepare()")
    parser.add_argument("--save-init", help="save the initial state_dict here (rank 0, before prepare)")
    parser.add_argument("--model-only", action="store_true", help="prepare the model alone (no optimizer state)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    session = pt.Session()
    torch.manual_seed(args.seed)
    tokens = torch.randint(0, args.vocab, (256, args.seq + 1), generator=torch.Generator().manual_seed(1))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(tokens), batch_size=16, shuffle=True)
    for name in ("torch.distributed.fsdp", "torch.distributed.checkpoint.state_dict", "torch.distributed.tensor"):
        importlib.import_module(name)
    for device in ("meta", "cpu"):  # the first model built on a device loads code: not the model's memory
        with torch.device(device):
            TinyLM(args.vocab, 8, 1, args.seq)
    metrics.start_peak_rss()
    with torch.device("cpu") if args.eager else session.init_module():
        model = TinyLM(args.vocab, args.dim, args.depth, args.seq)
    build_peak = metrics.peak_rss_above_start()
    sizes = {"model_bytes": _bytes(model.parameters()),
             "largest_block_bytes": max(_bytes(b.parameters()) for b in model.blocks)}
    if args.load:
        model.load_state_dict(torch.load(args.load, weights_only=True))
    if args.save_init and session.is_main:
        torch.save(model.state_dict(), args.save_init)
    optimizer = None if args.model_only else torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = session.prepare(model, optimizer, loader)
    local = [p.to_local() if hasattr(p, "to_local") else getattr(p, "ds_tensor", p) for p in model.parameters()]
    (out / f"setup-rank{session.rank}.json").write_text(json.dumps(
        {"build_peak_bytes": build_peak, "setup_peak_bytes": metrics.peak_rss_above_start(),
         "shard_bytes": sum(t.numel() * t.element_size() for t in local), **sizes}))

    losses: list[float] = []
    while len(losses) < args.steps:
        for (batch,) in loader:
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
            session.backward(loss)
            session.step()
            losses.append(session.all_reduce(loss.detach(), "mean").item())
            if len(losses) == args.steps:
                break
    if session.is_main:
        (out / "losses.json").write_text(json.dumps(losses))
    session.close()


if __name__ == "__main__":
    main()
