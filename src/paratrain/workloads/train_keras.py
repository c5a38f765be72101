"""The Keras twin of the bundled ``mlp`` workload, for the TensorFlow cells of `paratrain compare`.

Same data (the digits split of :mod:`paratrain.workloads.mlp`), same architecture, the same initial weights (the
torch model's, seeded as for every torch cell, handed over as numpy arrays), the same optimizer (SGD with momentum: see
``Workload.momentum``) and the same
batches in the same order (the Session's shuffle: ``torch.randperm`` seeded with the epoch). So its loss curve can be
held against the torch cells' — the cross-framework check of the report.

    paratrain run -s mirrored -n 2 src/paratrain/workloads/train_keras.py --steps 60
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from paratrain import tf as ptf


def _torch_side(width: int, epochs: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, list[np.ndarray], Any]:
    """(initial weights as Keras wants them, train x, train y, the Session's order per epoch, the test set)."""
    import torch

    from paratrain.workloads import mlp

    built = mlp.build(width=width)
    weights = []
    for layer in built.model:
        if isinstance(layer, torch.nn.Linear):
            weights += [layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()]
    x, y = (t.numpy() for t in built.train.tensors)
    n = len(x)
    orders = [torch.randperm(n, generator=torch.Generator().manual_seed(e)).numpy() for e in range(epochs)]
    test = tuple(t.numpy() for t in built.test.tensors)
    return weights, x, y, orders, test


def main(argv: list[str] | None = None) -> None:
    from paratrain.workloads import get

    p = argparse.ArgumentParser(description="Train the bundled mlp workload with Keras under paratrain.tf.")
    p.add_argument("--workload", default="mlp", choices=["mlp"], help="only mlp has a Keras version")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="global batch (per worker with --per-rank-batch)")
    p.add_argument("--per-rank-batch", action="store_true")
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--width", type=int, default=512)
    args = p.parse_args(argv)
    strategy = ptf.strategy()  # before any TensorFlow op (mirrored splits the CPU into replicas)
    import tensorflow as tf

    keras = ptf.keras()
    workload = get(args.workload)
    steps = args.steps or workload.steps
    batch = (args.batch_size or workload.global_batch) * (strategy.num_replicas_in_sync if args.per_rank_batch else 1)
    n_train = 1797 - 297
    per_epoch = math.ceil(n_train / batch)
    epochs = math.ceil(steps / per_epoch)
    init, x, y, orders, (tx, ty) = _torch_side(args.width, epochs)
    # One pass per torch epoch, in the Session's order, batched within the pass as the Session does (the last
    # batch of a pass is short); Keras continues the iterator across its epochs (steps_per_epoch).
    data = None
    for order in orders:
        one = tf.data.Dataset.from_tensor_slices((x[order], y[order].astype("int64"))).batch(batch)
        data = one if data is None else data.concatenate(one)
    data = ptf.shard_by_data(data)
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(args.width, activation="relu"),
                                  keras.layers.Dense(args.width, activation="relu"), keras.layers.Dense(10)])
        model.set_weights(init)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=args.lr or workload.lr,
                                                     momentum=workload.momentum or 0.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    history = model.fit(data, epochs=epochs, steps_per_epoch=per_epoch, shuffle=False, verbose=0,
                        callbacks=ptf.callbacks(batch, samples=n_train, max_steps=steps))
    test = ptf.batched(tf.data.Dataset.from_tensor_slices((tx, ty.astype("int64"))), 256)
    _, accuracy = model.evaluate(test, verbose=0)
    final = float(history.history["loss"][-1])
    ptf.log(final_loss=final, accuracy=float(accuracy))
    ptf.main_print(f"{workload.name} {ptf.method()}×{strategy.num_replicas_in_sync} (Keras {ptf.keras_version()}): "
                   f"loss {final:.4f} accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
