"""Every rank initialises its model differently; after prepare() all must hold rank 0's initial weights."""
import json
import sys
from pathlib import Path

import torch

import paratrain as pt

session = pt.Session()
torch.manual_seed(100 + session.rank)
model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ModuleList([torch.nn.Linear(8, 8)]), torch.nn.Linear(8, 2))
initial = {k: v.clone() for k, v in model.state_dict().items()}
model, _, _ = session.prepare(model)
full = session.model_state_dict()
gathered = [None] * session.world_size
torch.distributed.all_gather_object(gathered, {k: v.tolist() for k, v in initial.items()})
same_as_rank0 = all(torch.allclose(full[k].cpu(), torch.tensor(gathered[0][k])) for k in full)
Path(sys.argv[1], f"rank{session.rank}.json").write_text(json.dumps({"same_as_rank0": same_as_rank0}))
