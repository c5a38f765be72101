"""Hand-written DeepSpeed (the seed's DeepSpeed snippet, made runnable): the baseline paratrain is measured against.

Written for the ``deepspeed`` launcher, as DeepSpeed scripts are: it reads ``--local_rank`` (the launcher appends
it) and an optional ``--deepspeed_config``, initialises DeepSpeed itself and builds its optimizer from the config.
It runs unchanged under ``paratrain run`` too, which starts it the way the deepspeed launcher would:

    deepspeed --num_gpus 2 examples/handwritten/deepspeed.py --steps 200            # GPUs
    paratrain run --strategy deepspeed --nproc 2 examples/handwritten/deepspeed.py --steps 200
    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 examples/handwritten/deepspeed.py --steps 200

Each rank trains its contiguous slice of every global batch (so the loss curve matches single.py); DeepSpeed's own
defaults that would change the training are set explicitly (it clips gradients at 1.0 unless told 0).
"""

import argparse
import json
import os
import sys

# This file is named deepspeed.py (one baseline per method name): keep its own folder off the import path, so
# `import deepspeed` finds the library rather than this script.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != HERE]

import deepspeed  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

sys.path.insert(0, os.path.join(HERE, ".."))
from common import build_model, leave_process_group, make_dataset, parse_args, write_results  # noqa: E402


def deepspeed_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--local_rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0)))
    p.add_argument("--deepspeed_config", default=None, help="DeepSpeed JSON (default: ZeRO-2, built below)")
    p.add_argument("--zero", type=int, default=2)
    return p.parse_known_args()[0]


def config(args, ds_args, world: int) -> dict:
    if ds_args.deepspeed_config:
        with open(ds_args.deepspeed_config) as fh:
            return json.load(fh)
    optimizer = ({"type": "SGD", "params": {"lr": args.lr or 0.05, "momentum": 0.9}} if args.optimizer == "sgd"
                 else {"type": "AdamW", "params": {"lr": args.lr or 1e-3, "weight_decay": 0.01, "torch_adam": True}})
    return {"train_batch_size": args.batch_size, "train_micro_batch_size_per_gpu": args.batch_size // world,
            "optimizer": optimizer, "zero_optimization": {"stage": ds_args.zero},
            "gradient_clipping": 0.0, "zero_allow_untested_optimizer": True, "steps_per_print": 10**9}


def main() -> None:
    args, ds_args = parse_args(), deepspeed_args()
    deepspeed.init_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model()
    model_engine, _optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                                          config=config(args, ds_args, world))
    loader = DataLoader(make_dataset(args.samples), batch_size=args.batch_size, shuffle=False)
    criterion = torch.nn.CrossEntropyLoss()
    losses, step, ok = [], 0, False
    try:
        while step < args.steps:
            for inputs, labels in loader:
                # the global batch -> this rank's contiguous chunk, on this rank's device
                inputs = inputs.tensor_split(world)[rank].to(model_engine.device)
                labels = labels.tensor_split(world)[rank].to(model_engine.device)
                outputs = model_engine(inputs)
                loss = criterion(outputs, labels)
                model_engine.backward(loss)
                model_engine.step()
                mean = loss.detach().clone()
                dist.all_reduce(mean)
                losses.append(mean.item() / world)
                step += 1
                if step >= args.steps:
                    break
        state = {k: v.detach().cpu().clone() for k, v in model_engine.module.state_dict().items()}
        if rank == 0:
            print(f"final loss {losses[-1]:.4f}")
            write_results(args.out, losses, state)
        ok = True
    finally:
        leave_process_group(ok)


if __name__ == "__main__":
    main()
