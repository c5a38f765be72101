"""A script in the deepspeed launcher's style: it requires the --local_rank argument that launcher appends."""

import argparse
import json
import os
import sys

import deepspeed
import torch

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
p.add_argument("out")
p.add_argument("--zero", type=int, default=1)  # the stage of the script's own config
args = p.parse_args()
deepspeed.init_distributed()
model = torch.nn.Linear(4, 2)
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config={
    "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
    "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": args.zero}})
rank = torch.distributed.get_rank()
with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
    json.dump({"local_rank": args.local_rank, "env": int(os.environ["LOCAL_RANK"]), "argv": sys.argv[1:]}, fh)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
