"""The filter a quiet TensorFlow launch puts around `import tensorflow`: start-up chatter out, everything else in.
Lines as TensorFlow 2.21 writes them; the import itself is covered by test_tfrun.py's quiet run."""

from __future__ import annotations

import subprocess
import sys

from paratrain.launcher.tf_import import without_noise

WARNING = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = (b"I0000 00:00:1796398829.889742    3036 port.cc:153] oneDNN custom operations are on. You may see slightly "
          b"different numerical results due to floating-point round-off errors from different computation orders.\n")
CPU = (b"I0000 00:00:1796398830.117164    3036 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to use "
       b"available CPU instructions in performance-critical operations.\n"
       b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the appropriate "
       b"compiler flags.\n")
ERROR = b"E0000 00:00:1796398830.2    3036 cuda_dnn.cc:8579] Unable to register cuDNN factory\n"


def test_start_up_lines_go_and_errors_stay():
    text = WARNING + ONEDNN + WARNING + ONEDNN + CPU + ERROR + b"Traceback (most recent call last):\n"
    assert without_noise(text) == ERROR + b"Traceback (most recent call last):\n"
    own = b"my own warning: I0000 is not at the start\n"
    assert without_noise(own) == own


def test_what_the_block_writes_to_fd_2_comes_back_without_the_noise():
    code = ("import os, sys\n"
            "from paratrain.launcher.tf_import import quiet_stderr\n"
            "with quiet_stderr():\n"
            f"    os.write(2, {WARNING + ONEDNN!r})\n"
            "    print('python warning', file=sys.stderr)\n"
            f"    os.write(2, {ERROR!r})\n"
            "print('after', file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"python warning\n" + ERROR + b"after\n"
