"""paratrain.tf against hand-written tf.distribute: fit time of the same Keras training, as ratios.

    python benchmarks/keras_overhead.py [--repeats 3] [--epochs 3] [--methods mirrored,multiworker]

mirrored: examples/handwritten/mirrored.py run with plain `python` (it splits the CPU into 2 logical devices itself)
against examples/keras_train.py under `paratrain run --strategy mirrored --nproc 2`. multiworker: the hand-written
TF_CONFIG script against examples/keras_train.py, both under `paratrain run --strategy multiworker --nproc 2`
(TensorFlow has no launcher of its own to start the hand-written one with). Same model, data, batch and optimizer
(examples/handwritten/keras_common.py); runs interleaved so machine noise hits both alike. Prints the median fit
time of each side, its ratio (target: within noise of 1.0) and whether both reached the same loss.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HAND = {"mirrored": ROOT / "examples" / "handwritten" / "mirrored.py",
        "multiworker": ROOT / "examples" / "handwritten" / "multiworker.py"}
OURS = ROOT / "examples" / "keras_train.py"


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PARATRAIN_")}, "TF_CPP_MIN_LOG_LEVEL": "2",
            "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}


def _run(cmd: list[str], out: Path) -> dict:
    subprocess.run(cmd, check=True, capture_output=True, env=_env())
    return json.loads(out.read_text())


def one(method: str, epochs: int, tmp: Path) -> tuple[dict, dict]:
    args = ["--epochs", str(epochs), "--replicas", "2"]
    paratrain = [sys.executable, "-m", "paratrain.cli.main", "run", "-s", method, "-n", "2", "--threads", "1"]
    hand_cmd = [sys.executable, str(HAND[method])] if method == "mirrored" else [*paratrain, str(HAND[method])]
    hand = _run([*hand_cmd, *args, "--out", str(tmp / "hand.json")], tmp / "hand.json")
    ours = _run([*paratrain, str(OURS), *args, "--out", str(tmp / "ours.json")], tmp / "ours.json")
    return hand, ours


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--methods", default="mirrored,multiworker")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for method in args.methods.split(","):
            hand, ours, same = [], [], True
            for _ in range(args.repeats):
                h, o = one(method, args.epochs, Path(tmp))
                hand.append(h["fit_s"])
                ours.append(o["fit_s"])
                same = same and abs(h["losses"][-1] - o["losses"][-1]) <= 1e-5
            mh, mo = statistics.median(hand), statistics.median(ours)
            print(f"{method}×2: hand-written fit {mh:.2f} s, paratrain.tf {mo:.2f} s, ratio {mo / mh:.3f} "
                  f"(runs: {', '.join(f'{x:.2f}' for x in hand)} vs {', '.join(f'{x:.2f}' for x in ours)}); "
                  f"same final loss: {same}")


if __name__ == "__main__":
    main()
