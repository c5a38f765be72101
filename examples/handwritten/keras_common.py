"""What the hand-written Keras baselines and examples/keras_train.py share: one model, one data set, one result file,
so `benchmarks/keras_overhead.py` compares the launch and strategy code and nothing else."""

import argparse
import json
import time

import numpy as np


def parse_args(description: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128, help="global batch")
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--replicas", type=int, default=2, help="mirrored on CPUs: logical devices to split the CPU in")
    p.add_argument("--out", default=None, help="write losses, fit time and worker count here (JSON)")
    return p.parse_args()


def make_data(samples: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.RandomState(0)
    x = rng.rand(samples, 32).astype("float32")
    y = (x[:, :10].argmax(axis=1)).astype("int64")  # learnable: the largest of the first ten features
    return x, y


def build_and_compile(keras, width: int):
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(width, activation="relu"),
                              keras.layers.Dense(width, activation="relu"), keras.layers.Dense(10)])
    rng = np.random.RandomState(1)  # the same initial weights in every process and under every method
    model.set_weights([rng.randn(*w.shape).astype("float32") * 0.05 for w in model.get_weights()])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), metrics=["accuracy"])
    return model


def fit(model, dataset, epochs: int, callbacks=None) -> tuple[list[float], float]:
    start = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return [float(v) for v in history.history["loss"]], time.perf_counter() - start


def write_results(path: str | None, losses: list[float], fit_s: float, workers: int, replicas: int) -> None:
    print(f"loss {losses[-1]:.4f} after {len(losses)} epochs, fit {fit_s:.2f} s, {replicas} replica(s)")
    if path:
        with open(path, "w") as fh:
            json.dump({"losses": losses, "fit_s": fit_s, "workers": workers, "replicas": replicas}, fh)
