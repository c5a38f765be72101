"""Print the arguments this script received (rank 0 only), to check the launcher leaves them alone."""
import os
import sys

if os.environ.get("RANK", "0") == "0":
    print(sys.argv[1:])
