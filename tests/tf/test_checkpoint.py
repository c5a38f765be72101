"""ptf.checkpoint_manager: every worker saves, the main worker's folder holds it, any process restores it."""

from __future__ import annotations

import pytest

from tests.helpers.keras import KERAS_EQUIV, tf_env, under, weight_diff
from tests.helpers.launch import check, python
from tests.helpers.requirements import requires

pytestmark = [requires("tensorflow", "tf_keras"), pytest.mark.slow, pytest.mark.multiprocess]


def test_multiworker_checkpoint_restores_in_one_process(tmp_path):
    ckpt = tmp_path / "ckpt"
    check(under("multiworker", 2, tmp_path / "trained", "--loss", "mse", "--epochs", "1", "--ckpt", str(ckpt)))
    assert (ckpt / "checkpoint").is_file(), "the main worker's folder has no checkpoint index"
    # multiworker trains with tf_keras: one process restores it under the same Keras
    check(python(KERAS_EQUIV, str(tmp_path / "restored"), "--loss", "mse", "--ckpt", str(ckpt), "--restore",
                 env=tf_env(TF_USE_LEGACY_KERAS="1")))
    assert weight_diff(tmp_path / "trained", tmp_path / "restored") == 0.0
    # ... and under Keras 3 the mismatch is one clear line, not a silently untrained model
    proc = python(KERAS_EQUIV, str(tmp_path / "keras3"), "--loss", "mse", "--ckpt", str(ckpt), "--restore",
                  env=tf_env())
    assert proc.returncode != 0 and "does not hold this model's variables" in proc.stderr, proc.stderr
    assert not (tmp_path / "keras3" / "weights.npz").exists()
