"""A realistic Session script: a small Transformer-encoder classifier on synthetic token data it makes itself.

What an ordinary user writes, with the parts that have broken one method or another: a token embedding with a
padding index, the sinusoidal positional encoding of PyTorch's tutorial (an fp32 *buffer* added to the embeddings),
a stock ``nn.TransformerEncoder`` (post-norm LayerNorms, attention with a key padding mask, optional dropout, a final
LayerNorm; nested-tensor fast path left on), masked mean pooling, AdamW with weight decay, a warm-up + cosine
schedule stepped by the Session, gradient clipping, and an evaluation pass through ``session.prepare_eval`` after
every epoch (``model.eval()`` + ``torch.no_grad()``: the case where torch takes its nested-tensor fast path).

    paratrain run -s deepspeed:zero3 -n 2 --precision bf16-mixed transformer_cls.py OUT [--steps 24] [--dropout 0.1]

Writes (main rank) OUT/losses.json — the mean training loss of every step, the evaluation loss after every epoch,
the options — and OUT/weights.pt (the full final weights, fp32).
"""

import argparse
import json
import math
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt

VOCAB, PAD, CLASSES = 48, 0, 4
SEQ, DIM, HEADS, FF, LAYERS = 12, 32, 4, 64, 2
TRAIN, EVAL, BATCH = 256, 64, 32


class PositionalEncoding(nn.Module):
    """The tutorial's sinusoidal table, registered as a buffer: fp32 whatever the parameters' dtype."""

    def __init__(self, dim: int, length: int) -> None:
        super().__init__()
        position = torch.arange(length).unsqueeze(1)
        div = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(length, dim)
        table[:, 0::2] = torch.sin(position * div)
        table[:, 1::2] = torch.cos(position * div)
        self.register_buffer("table", table)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[: x.size(1)]


class Classifier(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=PAD)
        self.position = PositionalEncoding(DIM, SEQ)
        layer = nn.TransformerEncoderLayer(DIM, HEADS, FF, dropout=dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, norm=nn.LayerNorm(DIM))
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pad = tokens == PAD
        x = self.position(self.embed(tokens) * math.sqrt(DIM))
        x = self.encoder(x, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1).clamp(min=1.0))


def synthetic(n: int, seed: int) -> TensorDataset:
    """Sequences of 4..SEQ tokens padded on the right; the class is the residue (mod CLASSES) most tokens share."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=gen)
    tokens = torch.randint(1, VOCAB // CLASSES, (n, SEQ), generator=gen) * CLASSES + labels.unsqueeze(1)
    noise = torch.rand(n, SEQ, generator=gen) < 0.3
    tokens = torch.where(noise, torch.randint(1, VOCAB, (n, SEQ), generator=gen), tokens).clamp(1, VOCAB - 1)
    lengths = torch.randint(4, SEQ + 1, (n,), generator=gen)
    tokens[torch.arange(SEQ).unsqueeze(0) >= lengths.unsqueeze(1)] = PAD
    return TensorDataset(tokens, labels)


def schedule(steps: int, warmup: int = 3):
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
    return factor


def evaluate(session: pt.Session, model: nn.Module, loader) -> float:
    """Mean loss over every evaluation sample once: sums per rank, all-reduced, then divided."""
    model.eval()
    total, count = torch.zeros(()), torch.zeros(())
    with torch.no_grad():
        for tokens, labels in loader:
            logits = model(tokens)
            total += nn.functional.cross_entropy(logits, labels, reduction="sum").cpu()
            count += len(labels)
    model.train()
    return float(session.all_reduce(total, op="sum") / session.all_reduce(count, op="sum"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--dropout", type=float, default=0.0)
    args = parser.parse_args()
    session = pt.Session(seed=0, grad_clip=1.0)
    model = Classifier(args.dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(args.steps))
    train_loader = DataLoader(synthetic(TRAIN, 1), batch_size=BATCH, shuffle=True)
    model, optimizer, loader, scheduler = session.prepare(model, optimizer, train_loader, scheduler)
    eval_loader = session.prepare_eval(DataLoader(synthetic(EVAL, 2), batch_size=16))
    losses, evals = [], []
    while session.step_count < args.steps:
        for tokens, labels in loader:
            loss = nn.functional.cross_entropy(model(tokens), labels)
            session.backward(loss)
            session.step()
            losses.append(float(session.all_reduce(loss.detach(), op="mean")))
            if session.step_count >= args.steps:
                break
        evals.append(evaluate(session, model, eval_loader))
    state = session.model_state_dict()
    if session.is_main:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "losses.json"), "w") as fh:
            json.dump({"losses": losses, "eval": evals, "options": session.options.to_json()}, fh)
        torch.save({k: v.detach().float().cpu().clone() for k, v in state.items()},
                   os.path.join(args.out, "weights.pt"))
    session.close()


if __name__ == "__main__":
    main()
