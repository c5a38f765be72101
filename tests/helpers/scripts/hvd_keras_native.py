"""A Keras script written for horovodrun (no paratrain.tf): Horovod's own Keras recipe — ``hvd.init()``,
``hvd.DistributedOptimizer``, ``BroadcastGlobalVariablesCallback(0)`` — on fixed numpy data and weights.

Each rank takes rows ``rank::size`` of every global batch of 32 and the learning rate stays that of one process, so
N ranks train exactly what one process does. Rank 0 writes OUT/weights.npz and OUT/losses.json (the epoch losses,
averaged over the ranks), to be held against the same script run by plain ``python``.
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Horovod's Keras binding wraps Keras 2 optimizers
import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

out = Path(sys.argv[1])
hvd.init()
rng = np.random.RandomState(0)
x = rng.rand(256, 16).astype("float32")
y = rng.randint(0, 4, size=256)
init = [rng.randn(16, 32).astype("float32") * 0.3, np.zeros(32, "float32"),
        rng.randn(32, 4).astype("float32") * 0.3, np.zeros(4, "float32")]
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
data = data.map(lambda a, b: (a[hvd.rank()::hvd.size()], b[hvd.rank()::hvd.size()]))
model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(32, activation="relu"),
                             tf.keras.layers.Dense(4)])
model.set_weights(init)
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(data, epochs=3, shuffle=False, verbose=0,
                    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
losses = [float(hvd.allreduce(tf.constant(v), op=hvd.Average)) for v in history.history["loss"]]
if hvd.rank() == 0:
    out.mkdir(parents=True, exist_ok=True)
    np.savez(out / "weights.npz", *model.get_weights())
    (out / "losses.json").write_text(json.dumps({"losses": losses, "replicas": 1, "size": hvd.size()}))
