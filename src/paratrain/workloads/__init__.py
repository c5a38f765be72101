"""Bundled workloads for `paratrain compare`: real (small) data, no downloads.

- ``mlp``: a classifier on scikit-learn's 8×8 handwritten digits (1,797 images), reports test accuracy.
- ``gpt``: a small decoder-only transformer on character-level public-domain text, reports perplexity.
"""

from paratrain.workloads.base import Workload
from paratrain.workloads.registry import WORKLOADS, get

__all__ = ["WORKLOADS", "Workload", "get"]
