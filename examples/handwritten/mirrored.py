"""Hand-written MirroredStrategy (the seed's TensorFlow snippet, made runnable): the baseline for ``mirrored``.

    python examples/handwritten/mirrored.py --replicas 2

What the seed's snippet leaves out, added here: on a machine without GPUs MirroredStrategy() finds one device, so
the CPU is split into ``--replicas`` logical devices first (before any TensorFlow op, or TensorFlow refuses); the
dataset is batched with the *global* batch (Keras splits it across the replicas).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorflow as tf
from keras_common import build_and_compile, fit, make_data, parse_args, write_results

args = parse_args("Keras under a hand-written MirroredStrategy")
gpus = tf.config.list_physical_devices("GPU")
if gpus:
    strategy = tf.distribute.MirroredStrategy()
else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.replicas)],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
with strategy.scope():
    model = build_and_compile(tf.keras, args.width)
x, y = make_data(args.samples)
losses, fit_s = fit(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size), args.epochs)
write_results(args.out, losses, fit_s, 1, strategy.num_replicas_in_sync)
