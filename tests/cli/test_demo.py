"""The README's first command, as a new user runs it: `make demo`'s compare line, relative `--out`, from a folder
that is not the repository. Every other compare test passes an absolute folder; this one is the test that sees
what a user sees (a relative metrics folder once left every cell of the demo with nothing measured while the
rest of the suite stayed green)."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from matplotlib import image

from tests.helpers.launch import ROOT, paratrain

pytestmark = pytest.mark.multiprocess
STEPS = "40"  # the demo's own 120 steps measure nothing more here; 40 leave 35 timed steps after the warm-up


def demo_command() -> list[str]:
    """The compare line of the Makefile's demo target, as written there (without the venv's path)."""
    text = (ROOT / "Makefile").read_text()
    target = re.search(r"^demo:.*?\n((?:\t.*\n)+)", text, re.M)
    assert target, "the Makefile has no demo target"
    line = next(ln for ln in target.group(1).splitlines() if "paratrain compare" in ln)
    words = shlex.split(line.strip())
    return words[words.index("compare"):]


def colourful_pixels(png) -> int:
    """Pixels in a colour (bars, curves): axes, text and an empty frame are black, grey and white only."""
    pixels = image.imread(png)[..., :3]
    return int(((pixels.max(axis=-1) - pixels.min(axis=-1)) > 0.3).sum())


@pytest.mark.timeout(1200)
def test_make_demo_compare_from_another_folder_measures_every_default_cell(tmp_path):
    command = demo_command()
    out = command[command.index("--out") + 1]
    assert not os.path.isabs(out), "the demo writes to a relative folder; this test is about that case"
    user = tmp_path / "somewhere" / "else"
    user.mkdir(parents=True)
    proc = paratrain(*command, "--steps", STEPS, cwd=user, timeout=1100)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    folder = user / out
    results = json.loads((folder / "results.json").read_text())
    assert not (ROOT / out).exists() or (ROOT / out).stat().st_mtime < (folder / "results.json").stat().st_mtime
    for cell in results["cells"]:
        if cell["status"] == "unavailable" and os.environ.get("CI") != "true":
            continue  # a developer's machine without a backend; CI installs every one
        assert cell["status"] == "ok", (cell["key"], cell.get("error"))
        assert cell["samples_per_s"] > 0 and cell["losses"], cell["key"]
    keys = [c["key"] for c in results["cells"]]
    assert {"single×1", "ddp×2", "fsdp×2", "deepspeed:zero1×2", "deepspeed:zero3×2"} <= set(keys), keys
    assert results["recommendation"]["winner"] in keys
    plots = sorted(folder.glob("*.png"))
    assert len(plots) >= 4, plots
    for png in plots:
        assert colourful_pixels(png) > 500, f"{png.name} is an empty frame"
    report = (folder / "report.md").read_text()
    assert "No recommendation" not in report and "nothing to measure" not in report


def test_a_compare_in_which_no_cell_finishes_exits_non_zero(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('this script always fails')\n")
    proc = paratrain("compare", "--script", "broken.py", "--strategies", "single,ddp", "--nproc", "1",
                     "--out", "out", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "no cell finished" in last and "2 failed" in last, proc.stderr
    assert (tmp_path / "out" / "report.md").exists()  # the failures are still reported
