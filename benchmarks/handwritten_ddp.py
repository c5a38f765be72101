"""Hand-written DDP (or DeepSpeed, with --zero N; Horovod, with --horovod; tensor parallel, with --tp; pipeline
parallel, with --pp) on a bundled workload's model and data: the baselines of benchmarks/overhead.py.

    torchrun --standalone --nproc-per-node 2 benchmarks/handwritten_ddp.py --workload mlp --steps 200 --out t.json
    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node 2 benchmarks/handwritten_ddp.py --zero 2 --out t.json
    horovodrun -np 2 -H localhost:2 --gloo python benchmarks/handwritten_ddp.py --horovod --out t.json
    torchrun --standalone --nproc-per-node 2 benchmarks/handwritten_ddp.py --tp --workload gpt --out t.json
    torchrun --standalone --nproc-per-node 2 benchmarks/handwritten_ddp.py --pp --workload gpt --out t.json

Only the model and data come from paratrain.workloads; the loop is the idiomatic one (DistributedSampler,
per-rank batch = global batch / world size; under --tp and --pp every rank reads the whole batch). Rank 0
writes the wall time at which its first step ended and every step's duration (end of step to end of step).
"""

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from paratrain.workloads import get


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mlp")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--out", required=True)
    p.add_argument("--zero", type=int, default=None, help="DeepSpeed ZeRO stage instead of DDP (the seed's snippet)")
    p.add_argument("--horovod", action="store_true", help="Horovod instead of DDP (the seed's snippet)")
    p.add_argument("--tp", action="store_true", help="tensor parallel by the model's tp_plan (PyTorch's DTensor)")
    p.add_argument("--pp", action="store_true", help="pipeline parallel, Schedule1F1B (gpt: blocks cut by hand)")
    args = p.parse_args()
    use_cuda = torch.cuda.is_available()
    if args.horovod:
        import horovod.torch as hvd

        hvd.init()
        rank, world, local = hvd.rank(), hvd.size(), hvd.local_rank()
    else:
        dist.init_process_group("nccl" if use_cuda else "gloo")
        rank, world, local = dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    workload = get(args.workload)
    built = workload.build()
    if args.horovod:  # the seed's Horovod snippet: DistributedOptimizer + broadcasts from rank 0
        model = built.model.to(device)
        optimizer = hvd.DistributedOptimizer(torch.optim.AdamW(model.parameters(), lr=workload.lr),
                                             named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        backward, step_fn = (lambda loss: loss.backward()), (lambda: (optimizer.step(), optimizer.zero_grad()))
    elif args.tp:  # PyTorch's tensor-parallel recipe: the planned Linear layers split, the rest left as it is
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
        hf_plan = getattr(getattr(built.model, "config", None), "base_model_tp_plan", None)  # transformers' blocks
        plan = {f"model.{k}": v for k, v in hf_plan.items()} if hf_plan else built.model.tp_plan
        model = parallelize_module(built.model.to(device), init_device_mesh(device.type, (world,)),
                                   {name: styles[style]() for name, style in plan.items()})
        optimizer = torch.optim.AdamW(model.parameters(), lr=workload.lr)
        backward, step_fn = (lambda loss: loss.backward()), (lambda: (optimizer.step(), optimizer.zero_grad()))
    elif args.pp:  # torchtitan's recipe: each rank deletes what it does not hold, then Schedule1F1B
        from torch import nn
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B

        model = built.model
        layers = len(model.blocks)
        model.blocks = nn.ModuleList(list(model.blocks)[rank * layers // world:(rank + 1) * layers // world])
        if rank > 0:
            model.tok = model.pos = None
        if rank < world - 1:
            model.ln = model.head = None
        model.to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=workload.lr)
        schedule = Schedule1F1B(PipelineStage(model, rank, world, device), n_microbatches=2 * world,
                                loss_fn=built.loss_fn)

        def pipeline_step(x: torch.Tensor, y: torch.Tensor) -> None:
            if rank == 0:
                schedule.step(x)
            elif rank == world - 1:
                schedule.step(target=y)
            else:
                schedule.step()
            optimizer.step()
            optimizer.zero_grad()
    elif args.zero is None:
        model = DDP(built.model.to(device), device_ids=[device.index] if use_cuda else None)
        optimizer = torch.optim.AdamW(model.parameters(), lr=workload.lr)
        backward, step_fn = (lambda loss: loss.backward()), (lambda: (optimizer.step(), optimizer.zero_grad()))
    else:  # the seed's DeepSpeed snippet: engine.backward / engine.step
        import deepspeed

        optimizer = torch.optim.AdamW(built.model.parameters(), lr=workload.lr)
        model, _, _, _ = deepspeed.initialize(model=built.model, optimizer=optimizer, config={
            "train_micro_batch_size_per_gpu": workload.global_batch // world, "gradient_clipping": 0.0,
            "zero_optimization": {"stage": args.zero}, "steps_per_print": 10**9})
        backward, step_fn = model.backward, model.step
    # tensor and pipeline parallel: one replica, the whole batch on each rank
    replicas, replica = (1, 0) if args.tp or args.pp else (world, rank)
    sampler = DistributedSampler(built.train, num_replicas=replicas, rank=replica, shuffle=True, seed=0)
    loader = DataLoader(built.train, batch_size=workload.global_batch // replicas, sampler=sampler)
    times, first_end, step, epoch = [], None, 0, 0
    last = None
    while step < args.steps:
        sampler.set_epoch(epoch)
        epoch += 1
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            if args.pp:
                if last is None:
                    last = time.perf_counter()
                pipeline_step(x, y)
            else:
                loss = built.loss_fn(model(x), y)
                if last is None:
                    last = time.perf_counter()
                backward(loss)
                step_fn()
            now = time.perf_counter()
            times.append(now - last)
            last = now
            step += 1
            if first_end is None:
                first_end = time.time()
            if step >= args.steps:
                break
    if rank == 0:
        with open(args.out, "w") as fh:
            json.dump({"first_step_end": first_end, "step_times": times, "pid": os.getpid()}, fh)
    if args.horovod:
        hvd.shutdown()
        return
    # A monitored barrier before destroy: without it gloo can abort a finished rank at exit.
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=60)) if dist.get_backend() == "gloo" else dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
