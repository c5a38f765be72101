"""``gpt``: a small decoder-only transformer trained on characters of a bundled public-domain text.

Blocks live in an ``nn.ModuleList`` so FSDP shards them one by one, as it would a real language model.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from importlib import resources
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset, Subset

from paratrain.errors import ConfigError
from paratrain.workloads.base import Built, Init, Workload

SEQ_LEN = 64


def _text() -> str:
    return resources.files("paratrain.workloads").joinpath("data/declaration.txt").read_text(encoding="utf-8")


def char_ids() -> tuple[torch.Tensor, int]:
    """The bundled text as character ids, and how many distinct characters there are (the vocabulary)."""
    text = _text()
    vocab = sorted(set(text))
    return torch.tensor([vocab.index(c) for c in text], dtype=torch.long), len(vocab)


class CharWindows(Dataset):
    """Every SEQ_LEN-character window of the text (input) and the same window shifted by one (target)."""

    def __init__(self, ids: torch.Tensor, seq_len: int = SEQ_LEN) -> None:
        self.ids, self.seq_len = ids, seq_len

    def __len__(self) -> int:
        return len(self.ids) - self.seq_len - 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[i:i + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


class Block(nn.Module):
    """Pre-norm attention and MLP. The fused q/k/v projection keeps each head's q, k and v rows together and the
    forward infers the head count from its input, so a tensor-parallel split of its outputs (``TinyGPT.tp_plan``)
    gives each rank whole heads and the same code runs on the slice."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, -1, 3, self.head_dim).unbind(dim=3)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, -1))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    # How --strategy tp splits it (Megatron-LM's): q/k/v and the MLP's first layer by their outputs, the attention
    # output and the MLP's second layer by their inputs.
    tp_plan: ClassVar[dict[str, str]] = {"blocks.*.qkv": "colwise", "blocks.*.proj": "rowwise",
                                         "blocks.*.mlp.0": "colwise", "blocks.*.mlp.2": "rowwise"}

    def __init__(self, vocab: int, dim: int = 64, depth: int = 2, heads: int = 4, seq_len: int = SEQ_LEN) -> None:
        super().__init__()
        self.heads = heads
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        # Under --strategy pp a stage holds some blocks and not the parts other stages hold, which are None there:
        # the stages after the first take hidden states in, those before the last hand them out.
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)) if self.tok is not None else idx
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x)) if self.head is not None else x


def _loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _nll(logits: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum")
    return {"nll": float(nll.detach()), "tokens": float(target.numel())}


def _perplexity(sums: dict[str, float]) -> dict[str, float]:
    return {"perplexity": math.exp(sums["nll"] / sums["tokens"]) if sums.get("tokens") else float("nan")}


def build(width: int = 64, depth: int = 2, heads: int = 4, seed: int = 0, init: Init = nullcontext) -> Built:
    """``width`` is the model dimension (a multiple of ``heads``), ``depth`` the number of blocks."""
    if width % heads:
        raise ConfigError(f"gpt width {width} must be a multiple of {heads} (attention heads)")
    ids, vocab = char_ids()
    split = int(len(ids) * 0.9)
    torch.manual_seed(seed)
    with init():
        model = TinyGPT(vocab, width, depth, heads)
    test = CharWindows(ids[split:])
    every = max(1, len(test) // 64)  # 64 spread-out windows: a perplexity in a fraction of a second
    return Built(model, CharWindows(ids[:split]), Subset(test, range(0, len(test), every)), _loss, _nll, _perplexity)


WORKLOAD = Workload("gpt", "decoder-only transformer, character-level, on a bundled public-domain text", build,
                    global_batch=32, steps=60, lr=3e-3, tokens_per_sample=SEQ_LEN, splittable=True)
