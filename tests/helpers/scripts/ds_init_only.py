"""A deepspeed-launcher script that only forms its process group through DeepSpeed (deepspeed.init_distributed, no
deepspeed.initialize): it requires the --local_rank argument that launcher appends."""

import argparse
import json
import os

import deepspeed
import torch

p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
p.add_argument("out")
args = p.parse_args()
deepspeed.init_distributed()
rank = torch.distributed.get_rank()
with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
    json.dump({"local_rank": args.local_rank, "world": torch.distributed.get_world_size()}, fh)
torch.distributed.barrier()
torch.distributed.destroy_process_group()
