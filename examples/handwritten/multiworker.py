"""Hand-written MultiWorkerMirroredStrategy: the baseline for ``multiworker``, and a native TF_CONFIG script.

Written as TensorFlow's guide writes them: every worker runs this file with its own ``TF_CONFIG``. It runs unchanged
under paratrain, which writes those for it (and sets TF_USE_LEGACY_KERAS=1: Keras 3's fit() fails under this
strategy, keras-team/keras#20585):

    paratrain run --strategy multiworker --nproc 2 examples/handwritten/multiworker.py
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorflow as tf
from keras_common import build_and_compile, fit, make_data, parse_args, write_results

args = parse_args("Keras under a hand-written MultiWorkerMirroredStrategy")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
config = json.loads(os.environ.get("TF_CONFIG", "{}"))
index = config.get("task", {}).get("index", 0)
with strategy.scope():
    model = build_and_compile(tf.keras, args.width)
x, y = make_data(args.samples)
data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
losses, fit_s = fit(model, data.with_options(options), args.epochs)
if index == 0:  # the chief writes; every worker trained
    write_results(args.out, losses, fit_s, strategy.num_replicas_in_sync, strategy.num_replicas_in_sync)
