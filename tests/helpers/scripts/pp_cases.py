"""Pipeline-parallel cases on transformers (run under single and pp; writes OUT/result.json on the main rank).

    paratrain run -s pp -n 3 pp_cases.py OUT llama     # a Hugging Face Llama, 4 blocks over 3 stages, batches of 10
    paratrain run -s pp -n 2 pp_cases.py OUT noskip    # a model whose forward calls a part another stage holds
    paratrain run -s pp -n 2 pp_cases.py OUT memory    # a 100 M gpt built inside init_module: each rank's peak
"""

import json
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import paratrain as pt
from paratrain.workloads import get


class NoSkip(nn.Module):
    """Blocks in a ModuleList, but a forward that always calls its embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))
        self.head = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def built_memory(out: str) -> None:
    """A 100 M parameter gpt built inside init_module and prepared: each rank's RSS high-water mark above its start,
    against its stage's bytes and the whole model's."""
    import resource

    session = pt.Session(seed=0)
    start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    built = get("gpt").build(width=1024, depth=8, init=session.init_module)
    whole = sum(p.numel() * p.element_size() for p in built.model.parameters())
    model, _, _ = session.prepare(built.model, torch.optim.SGD(built.model.parameters(), lr=0.1), None)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start) * 1024
    stage = sum(p.numel() * p.element_size() for p in model.parameters())
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"memory-rank{session.rank}.json"), "w") as fh:
        json.dump({"peak": peak, "stage": stage, "whole": whole}, fh)
    session.close()


def main() -> None:
    out, case = sys.argv[1], sys.argv[2]
    if case == "memory":
        return built_memory(out)
    session = pt.Session(seed=0)
    if case == "noskip":
        model, loss_fn = NoSkip(), lambda out, y: nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())
        data = test = TensorDataset(torch.randint(0, 16, (8, 6)), torch.randint(0, 16, (8, 6)))
    else:
        built = get("llama").build(width=64, depth=4, init=session.init_module)  # pp: only rank 0 builds it whole
        model, loss_fn, data, test = built.model, built.loss_fn, built.train, built.test
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loader = DataLoader(data, batch_size=10, shuffle=True)
    model, optimizer, loader = session.prepare(model, optimizer, loader)
    losses = []
    while session.step_count < 20:
        for x, y in loader:
            losses.append(float(session.train_step(x, y, loss_fn)))
            if session.step_count >= 20:
                break
    model.eval()
    with torch.no_grad():  # evaluation through the stages: every rank gets the output
        x, y = next(iter(DataLoader(test, batch_size=5)))
        score = float(loss_fn(model(x.to(session.device)), y.to(session.device)))
    keys = sorted(session.model_state_dict())
    if session.is_main:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "result.json"), "w") as fh:
            json.dump({"losses": losses, "eval": score, "keys": keys}, fh)
    session.close()


if __name__ == "__main__":
    main()
