"""A small Keras model with fixed numpy weights and data, trained through paratrain.tf; writes what it learned.

    python keras_equiv.py OUT [--loss ce|mse] [--epochs N] [--die-rank R --die-epoch E]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import numpy as np

from paratrain import tf as ptf

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--loss", default="ce", choices=["ce", "mse"])
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--die-rank", type=int, default=None, help="this worker kills itself (SIGKILL) ...")
p.add_argument("--die-epoch", type=int, default=1, help="... at the start of this epoch")
p.add_argument("--ckpt", default=None, help="save a ptf checkpoint here after fit (every worker takes part)")
p.add_argument("--restore", action="store_true", help="no training: restore the newest --ckpt and write it")
p.add_argument("--stall-rank", type=int, default=None, help="this worker never reaches ptf.strategy()")
args = p.parse_args()

if args.stall_rank is not None and int(os.environ.get("RANK", "0")) == args.stall_rank:
    import time

    time.sleep(3600)
strategy = ptf.strategy()
import tensorflow as tf  # noqa: E402 - after the strategy, which must configure devices first

keras = ptf.keras()
rng = np.random.RandomState(0)
x = rng.rand(256, 16).astype("float32")
labels = rng.randint(0, 4, size=256)
y = labels if args.loss == "ce" else np.eye(4, dtype="float32")[labels]
init = [rng.randn(16, 32).astype("float32") * 0.3, np.zeros(32, "float32"),
        rng.randn(32, 4).astype("float32") * 0.3, np.zeros(4, "float32")]

with strategy.scope():
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    model.set_weights(init)
    loss = (keras.losses.SparseCategoricalCrossentropy(from_logits=True) if args.loss == "ce"
            else keras.losses.MeanSquaredError())
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9), loss=loss)


class Die(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == args.die_epoch and ptf.rank() == args.die_rank and not os.environ.get("KERAS_EQUIV_RESUMED"):
            os.kill(os.getpid(), signal.SIGKILL)


if args.restore:
    manager = ptf.checkpoint_manager(tf.train.Checkpoint(model=model), args.ckpt)
    assert manager.restore_latest(), "no checkpoint to restore"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "weights.npz", *model.get_weights())
    raise SystemExit(0)
data = ptf.batched(tf.data.Dataset.from_tensor_slices((x, y)), args.batch)
history = model.fit(data, epochs=args.epochs, shuffle=False, verbose=0,
                    callbacks=[*ptf.callbacks(args.batch, samples=len(x)), Die()])
if args.ckpt:
    ptf.checkpoint_manager(tf.train.Checkpoint(model=model), args.ckpt).save()
if ptf.is_main():
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "weights.npz", *model.get_weights())
    (out / "losses.json").write_text(json.dumps({"losses": [float(v) for v in history.history["loss"]],
                                                 "replicas": strategy.num_replicas_in_sync,
                                                 "keras": ptf.keras_version()}))
ptf.main_print(f"done: {strategy.num_replicas_in_sync} replica(s), loss {history.history['loss'][-1]:.6f}")
