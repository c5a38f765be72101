"""A bare DeepSpeed script (no Session): ZeRO-3 over a stock ``nn.TransformerEncoder`` that evaluates with a padding
mask — the case where torch packs the batch into a nested tensor that ZeRO-3's hooked attention cannot take.
Writes OUT/eval<rank>.json with the evaluation loss."""

import argparse
import json
import os

import deepspeed
import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, default=0)
p.add_argument("out")
args = p.parse_args()
deepspeed.init_distributed()
torch.manual_seed(0)


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x, src_key_padding_mask=pad)[:, 0])


model = Classifier()
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={
    "train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": 3}})
x = torch.randn(4, 6, 16)
pad = torch.zeros(4, 6, dtype=torch.bool)
pad[:, 4:] = True  # the last two positions of every sequence are padding
for _ in range(2):
    loss = engine(x, pad).pow(2).mean()
    engine.backward(loss)
    engine.step()
engine.eval()
with torch.no_grad():  # eval + no_grad + a padding mask: torch's nested-tensor fast path
    loss = engine(x, pad).pow(2).mean()
with open(os.path.join(args.out, f"eval{torch.distributed.get_rank()}.json"), "w") as fh:
    json.dump({"loss": float(loss)}, fh)
torch.distributed.barrier()
