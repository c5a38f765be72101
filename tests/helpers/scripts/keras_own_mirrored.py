"""A native Keras script, as TensorFlow's guide writes one: it builds its own tf.distribute.MirroredStrategy() and
never calls ptf.strategy(); it even runs an op first, after which TensorFlow can no longer split the CPU.

    python keras_own_mirrored.py [--default | --ptf-late]

--default builds no strategy (TensorFlow's default one, one replica); --ptf-late calls ptf.strategy() after that
first op instead. Prints the replicas it trained with.
"""

from __future__ import annotations

import argparse

import numpy as np
import tensorflow as tf

p = argparse.ArgumentParser()
p.add_argument("--default", action="store_true", help="no strategy of its own: TensorFlow's default")
p.add_argument("--ptf-late", action="store_true", help="ptf.strategy() after TensorFlow's runtime has started")
args = p.parse_args()

tf.constant(1.0)  # TensorFlow's runtime starts here: from now on no device can be configured
if args.ptf_late:
    from paratrain import tf as ptf

    strategy = ptf.strategy()
elif args.default:
    strategy = tf.distribute.get_strategy()
else:
    strategy = tf.distribute.MirroredStrategy()
print(f"replicas in sync: {strategy.num_replicas_in_sync}", flush=True)

rng = np.random.RandomState(0)
x, y = rng.rand(64, 8).astype("float32"), rng.rand(64, 1).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
print(f"fit done: loss {history.history['loss'][-1]:.4f}", flush=True)
