"""Bundled workloads for `paratrain compare`: real (small) data, no downloads.

- ``mlp``: a classifier on scikit-learn's 8×8 handwritten digits (1,797 images), reports test accuracy.
- ``cnn``: a small convolutional net on the same digits.
- ``gpt``: a small decoder-only transformer on character-level public-domain text, reports perplexity.
- ``llama``: a tiny Hugging Face transformers Llama on the same text (needs the ``[hf]`` extra); ``hf:PATH`` trains
  any local Hugging Face config's causal language model the same way.
"""

from paratrain.workloads.base import Workload
from paratrain.workloads.registry import WORKLOADS, get

__all__ = ["WORKLOADS", "Workload", "get"]
