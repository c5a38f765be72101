"""Say it started, then sleep: a job to interrupt at a chosen moment."""

import os
import time

print("started rank", os.environ.get("RANK", "0"), flush=True)
time.sleep(60)
