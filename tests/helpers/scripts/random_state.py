"""Print each rank's first draws from Python's, numpy's and torch's generators, unseeded, as JSON."""

import json
import os
import random

import numpy as np
import torch

print("RANDOM " + json.dumps({"rank": int(os.environ.get("RANK", "0")), "python": random.random(),
                              "numpy": float(np.random.rand()), "torch": torch.rand(3).tolist()}), flush=True)
