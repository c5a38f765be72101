"""Every path a user gives compare is the user's: relative to where compare was started, although each cell runs in a
folder of its own."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from tests.helpers.launch import EXAMPLES, check, paratrain

pytestmark = pytest.mark.multiprocess


@pytest.mark.timeout(600)
def test_relative_script_args_config_out_and_db_are_the_users(tmp_path):
    for name in ("session_train.py", "common.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    check(paratrain("run", "-s", "single", "session_train.py", "--steps", "4", "--save", "ckpt", "--out", "first",
                    cwd=tmp_path))
    (tmp_path / "ds.json").write_text(json.dumps({"steps_per_print": 1000}))
    check(paratrain("compare", "--script", "session_train.py", "--script-args", "--load ckpt --steps 14 --out res",
                    "--strategies", "single,deepspeed:zero1,config=ds.json", "--nproc", "1", "--warmup", "2",
                    "--out", "out", "--db", "hist.db", cwd=tmp_path, timeout=500))
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    cells = {c["key"]: c for c in results["cells"]}
    assert set(cells) == {"single×1", "deepspeed:zero1,config=ds.json×1"}, cells  # as the user wrote them
    for cell in cells.values():
        assert cell["status"] == "ok", cell.get("error")  # ckpt and ds.json were found from the cells' folders
        assert cell["equivalence"] == "exact", cell["equivalence_reason"]
    # --load resumed the checkpoint: the loss starts where 4 steps left it, not at an untrained model's
    first = json.loads((tmp_path / "first" / "losses.json").read_text())["losses"]
    assert cells["single×1"]["losses"][0] < first[0]
    # the script's output folder did not exist: it is an output, written inside each cell's own folder
    assert not (tmp_path / "res").exists()
    assert len(list((tmp_path / "out" / "cells").glob("*/run1/work/res/losses.json"))) == 2
    with sqlite3.connect(tmp_path / "hist.db") as db:
        assert db.execute("select count(*) from runs").fetchone()[0] == 1


def test_an_absolute_checkpoint_dir_in_paratrain_toml_is_refused(tmp_path):
    """Every cell would resume the one before it from the same folder."""
    shutil.copy(EXAMPLES / "session_train.py", tmp_path / "train.py")
    (tmp_path / "paratrain.toml").write_text(f'[run]\ncheckpoint_dir = "{tmp_path / "ck"}"\ncheckpoint_every = 5\n')
    proc = paratrain("compare", "--script", "train.py", "--strategies", "single", "--nproc", "1", "--out", "out",
                     cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "every compare cell would write and resume the same checkpoints" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()
