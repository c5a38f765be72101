"""The hand-written Keras baselines' training, written with paratrain.tf: one script for plain, mirrored and
multiworker runs. `benchmarks/keras_overhead.py` times it against examples/handwritten/{mirrored,multiworker}.py.

    python examples/keras_train.py
    paratrain run --strategy mirrored --nproc 2 examples/keras_train.py
    paratrain run --strategy multiworker --nproc 2 examples/keras_train.py
    paratrain compare --script examples/keras_train.py      # the TensorFlow methods side by side
"""

import os
import sys

from paratrain import tf as ptf

strategy = ptf.strategy()  # first: before any TensorFlow op
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "handwritten"))
import tensorflow as tf  # noqa: E402
from keras_common import build_and_compile, fit, make_data, parse_args, write_results  # noqa: E402

args = parse_args("Keras under the strategy paratrain run chose")
with strategy.scope():
    model = build_and_compile(ptf.keras(), args.width)
x, y = make_data(args.samples)
# ptf.callbacks: what the launcher asks for (compare's step recorder, --checkpoint-dir's backup); none otherwise.
losses, fit_s = fit(model, ptf.batched(tf.data.Dataset.from_tensor_slices((x, y)), args.batch_size), args.epochs,
                    ptf.callbacks(args.batch_size, samples=args.samples))
if ptf.is_main():
    write_results(args.out, losses, fit_s, ptf.world_size(), strategy.num_replicas_in_sync)
