import os
import sys

sys.exit(3 if os.environ.get("RANK", "0") == "1" or os.environ.get("WORLD_SIZE", "1") == "1" else 0)
