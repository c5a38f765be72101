"""The README's first command, as a new user runs it: `make demo`'s compare line, relative `--out`, from a folder
that is not the repository. Every other compare test passes an absolute folder; this one is the test that sees
what a user sees (a relative metrics folder once left every cell of the demo with nothing measured while the
rest of the suite stayed green).

The same run (every default method at 1 and 2 processes: the longest in the suite) is also where the default
cells' own promises are checked — DeepSpeed's state against advise, Horovod's unseen communication, the Keras
cells against torch — instead of each starting a compare of its own."""

from __future__ import annotations

import csv
import json
import os
import sqlite3

import pytest
from matplotlib import image

from paratrain.advise import memory, models
from paratrain.advise.methods import get
from tests.helpers import default_compare as default_compare_run
from tests.helpers.launch import ROOT, check, paratrain
from tests.helpers.memory import assert_state_is_advises
from tests.helpers.requirements import requires

# whichever test comes first runs the compare; the file starts first under `make test` (the suite's longest)
pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(1200), pytest.mark.first]


@pytest.fixture(scope="module")
def default_compare(tmp_path_factory) -> default_compare_run.DefaultCompare:
    return default_compare_run.run(tmp_path_factory.mktemp("default-compare"))


def colourful_pixels(png) -> int:
    """Pixels in a colour (bars, curves): axes, text and an empty frame are black, grey and white only."""
    pixels = image.imread(png)[..., :3]
    return int(((pixels.max(axis=-1) - pixels.min(axis=-1)) > 0.3).sum())


def test_make_demo_compare_from_another_folder_measures_every_default_cell(default_compare):
    """`default_compare` is the Makefile's demo line run from another folder (tests/helpers/default_compare.py)."""
    run = default_compare
    assert not os.path.isabs(run.out), "the demo writes to a relative folder; this test is about that case"
    proc = run.proc
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    folder, results = run.folder, run.results
    assert not (ROOT / run.out).exists() or (ROOT / run.out).stat().st_mtime < (folder / "results.json").stat().st_mtime
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
    report = run.report
    assert "No recommendation" not in report and "nothing to measure" not in report


CELL_KEYS = {"strategy", "nproc", "status", "samples_per_s", "step_time_median_s", "step_time_p90_s", "startup_s",
             "wall_s", "peak_mem_bytes", "state_bytes", "scaling_efficiency", "final_loss", "loss_max_abs_diff",
             "error", "log"}
TORCH_CELLS = ("ddp×1", "ddp×2", "fsdp×1", "fsdp×2")
PNG = b"\x89PNG\r\n\x1a\n"


def test_results_schema_and_equivalence(default_compare):
    results, cells = default_compare.results, default_compare.cells
    assert results["settings"]["workload"] == "mlp"
    assert {"torch", "inventory"} <= set(results["env"])
    steps = results["settings"]["steps"]
    for key in TORCH_CELLS:
        cell = cells[key]
        assert set(cell) >= CELL_KEYS
        assert cell["status"] == "ok", cell
        assert cell["samples_per_s"] > 0 and cell["step_time_median_s"] > 0
        assert len(cell["peak_mem_bytes"]) == cell["nproc"] and len(cell["state_bytes"]) == cell["nproc"]
        assert cell["loss_max_abs_diff"] is not None and cell["loss_max_abs_diff"] <= 1e-5
        assert cell["equivalence"] == "exact", cell["equivalence_reason"]  # an MLP still matches exactly
        assert len(cell["losses"]) == steps and 0 < cell["extra"]["accuracy"] <= 1
    assert results["reference"] == "single×1"
    assert results["floors"] == {}  # every cell exact: no noise floor was needed, nothing extra ran
    assert cells["ddp×1"]["model"] == {"dropout": [], "batchnorm": [], "sync_batchnorm": False, "conv": False}
    # Every cell gets the whole machine, whatever OMP_NUM_THREADS the test environment sets (1): the thread count
    # each worker reported equals the cores divided by the cell's processes.
    cores = len(os.sched_getaffinity(0))
    assert results["env"]["cores"] == cores
    for key in TORCH_CELLS:
        assert cells[key]["threads_per_process"] == max(1, cores // cells[key]["nproc"]), cells[key]
        assert cells[key]["oversubscribed"] is (cells[key]["nproc"] > cores)
    # FSDP over 2 ranks holds half the model state of DDP on each rank.
    assert cells["fsdp×2"]["state_bytes"][0] < 0.6 * cells["ddp×2"]["state_bytes"][0]
    # DDP's gradient buckets (a second copy of the gradients, held by C++) are in its CPU tensors' peak: at the
    # optimizer step it holds its state and them (without them the mlp's ddp×2 peaked at 4.4 MB for 4.8 MB of both).
    ddp = cells["ddp×2"]
    assert ddp["peak_mem_kind"] == "cpu_tensors", ddp["peak_mem_kind"]
    assert all(peak >= held + 4 * ddp["param_count"] for peak, held in zip(ddp["peak_mem_bytes"], ddp["state_bytes"],
                                                                         strict=True)), ddp


def test_report_files_plots_and_history(default_compare):
    out, results = default_compare.folder, default_compare.results
    for name in ("results.json", "results.csv", "report.md"):
        assert (out / name).is_file()
    for name in ("throughput.png", "step_times.png", "memory.png", "loss_curves.png", "breakdown.png", "scaling.png"):
        assert (out / name).read_bytes()[:8] == PNG
    with open(out / "results.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(results["cells"])
    section = default_compare.report.split("## Equivalence")[1].split("## How to reproduce")[0]
    verdicts = [line for line in section.splitlines() if line.startswith("- ")]
    assert len(verdicts) == len(results["cells"]) and not any("NOT EQUIVALENT" in v for v in verdicts), verdicts
    # the demo passes no --db: its row is in the default history (the suite's private PARATRAIN_HOME)
    with sqlite3.connect(os.path.join(os.environ["PARATRAIN_HOME"], "history.db")) as db:
        assert (results["id"],) in db.execute("SELECT id FROM runs").fetchall()
    listed = check(paratrain("history", "--json"))
    assert results["id"] in [run["id"] for run in json.loads(listed.stdout)]


def test_time_breakdown_adds_up_and_counts_the_bytes_ddp_sends(default_compare):
    results, cells = default_compare.results, default_compare.cells
    settings = results["settings"]
    for key in TORCH_CELLS:
        cell, parts = cells[key], cells[key]["breakdown"]
        total = sum(parts[k] for k in ("compute_s", "comm_exposed_s", "data_s", "optimizer_s", "other_s"))
        assert abs(total - cell["step_time_median_s"]) <= 0.1 * cell["step_time_median_s"], (key, parts)
        # The 3 profiled steps are not in the throughput: the warm-up and those 3 are left out of the timing.
        assert len(cell["step_times_s"]) == settings["steps"] - settings["warmup"] - 3, key
    ddp = cells["ddp×2"]
    ring = ddp["param_count"] * 4 * 2 * (2 - 1) / 2  # fp32 gradients, ring all-reduce over 2 ranks
    assert abs(ddp["comm_bytes_per_step"] - ring) <= 0.05 * ring
    assert ddp["comm_share"] > 0 and ddp["bus_gbps"] > 0 and ddp["breakdown"]["comm_total_s"] > 0
    assert cells["ddp×1"]["comm_bytes_per_step"] == 0 and cells["fsdp×2"]["comm_bytes_per_step"] > 0
    assert "## Where the time goes" in default_compare.report


def test_the_state_each_rank_holds_is_what_advise_predicts(default_compare):
    """Byte for byte, for every torch method but DeepSpeed's (the next test) at 1 and 2 processes: parameters,
    gradients and the mlp's momentum buffers, whole or sharded in FSDP's layout."""
    spec = models.from_bundled("mlp")
    cells = [c for c in default_compare.results["cells"]
             if c["framework"] == "torch" and not c["strategy"].startswith("deepspeed")]
    assert {c["strategy"] for c in cells} >= {"single", "dp", "ddp", "fsdp", "horovod"}, [c["key"] for c in cells]
    assert_state_is_advises(cells, spec, "sgd-momentum")  # the mlp's optimizer, in fp32


@requires("deepspeed")
def test_compare_cells_are_exact_and_count_the_engines_state(default_compare):
    cells = default_compare.cells  # `make demo`'s compare: every stage at 1 and 2 processes, and single
    stages = [k for k in cells if k.startswith("deepspeed:") or k == "single×1"]
    assert all(cells[k]["status"] == "ok" and cells[k]["equivalence"] == "exact" for k in stages), \
        {k: (cells[k]["status"], cells[k]["error"], cells[k]["equivalence_reason"]) for k in stages}
    keys = {1: "deepspeed:zero1×2", 2: "deepspeed:zero2×2", 3: "deepspeed:zero3×2"}  # as written
    assert {cells[k]["param_count"] for k in keys.values()} == {cells["single×1"]["param_count"]}  # ZeRO-3 too
    # what the engine holds (master copies, partitions, flat buffers — not model.parameters()) is what `advise`
    # predicts from DeepSpeed's layouts, to a few scalars (step counter, gradient norm, overflow flag)
    spec, plan = models.from_bundled("mlp"), memory.Plan(ranks=2, optimizer="sgd-momentum")  # the mlp's optimizer
    for stage, key in keys.items():
        predicted = memory.rank_memory(spec, get(f"deepspeed:zero{stage}").sharding, plan, rank=0)
        measured = cells[key]["state_bytes"][0]
        assert 0 <= measured - predicted.state <= 64, (stage, measured, predicted)


@requires("horovod")
def test_compare_never_reports_horovods_unseen_communication_as_zero(default_compare):
    """The torch profiler does not see Horovod's collectives (its own C++ thread runs them): the cell says "not
    measured" (None), never 0 MB sent and 0 % of the step in communication."""
    cell = default_compare.cells["horovod×2"]  # `make demo`'s compare
    assert cell["status"] == "ok" and cell["breakdown"] is not None, cell
    for key in ("comm_bytes_per_step", "comm_share"):
        assert cell[key] is None or cell[key] > 0, (key, cell[key])
    assert cell["breakdown"]["comm_exposed_s"] is None or cell["breakdown"]["comm_exposed_s"] > 0
    breakdown = default_compare.report.split("## Where the time goes", 1)[1]
    row = next(line for line in breakdown.splitlines() if line.startswith("| horovod×2 |"))
    assert "not measured" in row and " 0.00 |" not in row, row


@requires("tensorflow", "tf_keras")
@pytest.mark.slow
@pytest.mark.multiprocess
def test_keras_cells_train_the_same_as_torch(default_compare):
    results = default_compare.results  # `make demo`'s compare: the Keras methods are among its default cells
    cells = default_compare.cells
    steps = results["settings"]["steps"]
    assert {"single×1", "mirrored×2", "multiworker×2"} <= set(cells)
    for key in ("mirrored×1", "mirrored×2", "multiworker×2"):
        cell = cells[key]
        assert cell["status"] == "ok" and cell["framework"] == "tensorflow" and len(cell["losses"]) == steps, cell
        assert cell["loss_max_abs_diff"] <= 1e-4 and cell["equivalence"] == "exact", cell["equivalence_reason"]
        assert cell["state_bytes"] and all(b > 0 for b in cell["state_bytes"])
    cross = results["cross_framework"]
    assert cross["same"] and cross["max_abs_diff"] <= 1e-4 and cross["reference"] == "single×1"
    assert "**PyTorch vs Keras**" in default_compare.report


def test_a_compare_in_which_no_cell_finishes_exits_non_zero(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise SystemExit('this script always fails')\n")
    proc = paratrain("compare", "--script", "broken.py", "--strategies", "single,ddp", "--nproc", "1",
                     "--out", "out", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "no cell finished" in last and "2 failed" in last, proc.stderr
    assert (tmp_path / "out" / "report.md").exists()  # the failures are still reported
