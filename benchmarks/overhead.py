"""paratrain's overhead over hand-written DDP (or DeepSpeed, Horovod): step time and launch-to-first-step, as ratios.

    python benchmarks/overhead.py [--steps 200] [--repeats 5] [--workloads mlp,gpt] [--method deepspeed|horovod]
    python benchmarks/overhead.py --method tp --workloads gpt,llama   # tp needs a model with a plan
    python benchmarks/overhead.py --method pp --workloads gpt         # the hand-written baseline cuts gpt only

For each workload, runs hand-written DDP under torchrun (benchmarks/handwritten_ddp.py) and the same model, data
and optimizer through `paratrain run --strategy ddp` (the bundled Session script), 2 processes on CPU/gloo,
interleaving the two so that machine noise hits both alike (--method horovod: both under horovodrun). Prints
medians and ratios; targets: step-time ratio ≤ 1.01, start-up ≤ torchrun + 0.3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 10


ZERO = "2"  # --method deepspeed: ZeRO-2 on both sides
METHOD = {"ddp": ("ddp", []), "deepspeed": (f"deepspeed:zero_stage={ZERO}", ["--zero", ZERO]),
          "horovod": ("horovod", ["--horovod"]), "tp": ("tp", ["--tp"]), "pp": ("pp:1f1b", ["--pp"])}
LAUNCH = {"horovod": ["-m", "horovod.runner.launch", "-np", "2", "-H", "localhost:2", "--gloo", sys.executable]}
TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def run_handwritten(workload: str, steps: int, tmp: Path, method: str = "ddp") -> tuple[float, float]:
    out = tmp / "hand.json"
    t0 = time.time()
    subprocess.run([sys.executable, *LAUNCH.get(method, TORCHRUN), str(ROOT / "benchmarks" / "handwritten_ddp.py"),
                    "--workload", workload, "--steps", str(steps), "--out", str(out), *METHOD[method][1]],
                   check=True, capture_output=True,
                   env=_env(DS_ACCELERATOR="cpu") if method == "deepspeed" else _env())
    data = json.loads(out.read_text())
    return statistics.median(data["step_times"][WARMUP:]), data["first_step_end"] - t0


def run_paratrain(workload: str, steps: int, tmp: Path, method: str = "ddp") -> tuple[float, float]:
    metrics = tmp / "metrics"
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "paratrain.cli.main", "run", "--strategy", METHOD[method][0], "--nproc", "2",
                    str(ROOT / "src" / "paratrain" / "workloads" / "train.py"), "--workload", workload,
                    "--steps", str(steps)], check=True, capture_output=True,
                   env=_env(PARATRAIN_METRICS=str(metrics)))
    records = [json.loads(line) for line in (metrics / "rank0.jsonl").read_text().splitlines()]
    steps_rec = [r for r in records if "step" in r]
    return statistics.median(r["dt"] for r in steps_rec[WARMUP:]), steps_rec[0]["t"] - t0


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARATRAIN_")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workloads", default="mlp,gpt")
    p.add_argument("--method", choices=sorted(METHOD), default="ddp")
    args = p.parse_args()
    print(f"{'workload':8} {'hand step ms':>12} {'pt step ms':>10} {'ratio':>6}   {'hand start s':>12} "
          f"{'pt start s':>10} {'diff s':>7}")
    for workload in args.workloads.split(","):
        hand_step, pt_step, hand_start, pt_start, ratios = [], [], [], [], []
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                order = [("hand", run_handwritten), ("pt", run_paratrain)]
                measured = {}
                for name, fn in order if i % 2 == 0 else reversed(order):
                    sub = Path(tmp) / name
                    sub.mkdir()
                    measured[name] = fn(workload, args.steps, sub, args.method)
            hand_step.append(measured["hand"][0])
            pt_step.append(measured["pt"][0])
            hand_start.append(measured["hand"][1])
            pt_start.append(measured["pt"][1])
            ratios.append(measured["pt"][0] / measured["hand"][0])
        hs, ps = statistics.median(hand_step), statistics.median(pt_step)
        h0, p0 = statistics.median(hand_start), statistics.median(pt_start)
        print(f"{workload:8} {hs * 1e3:12.3f} {ps * 1e3:10.3f} {statistics.median(ratios):6.3f}   {h0:12.2f} "
              f"{p0:10.2f} {p0 - h0:+7.2f}")


if __name__ == "__main__":
    main()
