"""The `paratrain` command line: a thin layer that parses, calls the library and renders.

Imported first when the command starts (``paratrain …`` or ``python -m paratrain.cli.main …``), before click, rich
or torch: from here until the command's own handlers are in place (``exiting.stop_on_signals``), a Ctrl-C or SIGTERM
is noted and acted on then, not raised into those imports, where it printed an import's traceback and exited -2
(a Ctrl-C 0.2 s into `paratrain run` on a busy machine). Imported as a library (a test, a notebook), nothing changes.
"""

import os
import sys

from paratrain import exiting

if sys.argv and (sys.argv[0] == "-m" or os.path.basename(sys.argv[0]) == "paratrain"):
    exiting.hold_signals()
