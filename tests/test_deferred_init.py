"""``session.init_module()``: a model built so that no rank but one ever holds it whole — real processes on CPU/gloo.

The model (tests/helpers/scripts/deferred_init.py) carries the known traps: a non-persistent buffer computed in
``__init__``, an output head tied to the embedding, LayerNorm and attention. Each rank's setup memory is its RSS
high-water mark above its RSS before the model is built (what prepare() imports is imported before that).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.launch import ROOT, check, paratrain
from tests.helpers.requirements import requires

pytestmark = pytest.mark.multiprocess
SCRIPT = str(ROOT / "tests" / "helpers" / "scripts" / "deferred_init.py")
SIZE = ("--dim", "64", "--depth", "2")  # every trap, small enough that 100 steps take seconds
BIG = ("--dim", "1536", "--depth", "4")  # 430 MB, only built and prepared, for the memory bounds
STEPS = 100
TOL = 1e-5


def _run(folder, spec: str, nproc: int, *args: str) -> tuple[list[float], dict[int, dict]]:
    size = () if "--dim" in args else SIZE
    check(paratrain("run", "-s", spec, "-n", str(nproc), SCRIPT, str(folder), *size, *args, timeout=400))
    losses = json.loads((folder / "losses.json").read_text())
    setup = {int(p.stem.removeprefix("setup-rank")): json.loads(p.read_text()) for p in folder.glob("setup-rank*.json")}
    return losses, setup


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """One process, the model built as usual: from seed 0, and from seed 1 (whose initial weights it saves)."""
    root = tmp_path_factory.mktemp("single")
    seed0, _ = _run(root / "seed0", "single", 1, "--steps", str(STEPS), "--eager")
    seed1, _ = _run(root / "seed1", "single", 1, "--steps", "20", "--eager", "--seed", "1",
                    "--save-init", str(root / "init-seed1.pt"))
    return {"seed0": seed0, "seed1": seed1, "init": root / "init-seed1.pt"}


def _diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(("spec", "nproc"), [
    ("fsdp", 2), pytest.param("deepspeed:zero3", 2, marks=requires("deepspeed"))])
def test_a_deferred_model_trains_the_single_process_curve(tmp_path, single, spec, nproc):
    """Rank 0's initial weights, the non-persistent buffer and the tying all reach every rank intact."""
    losses, _ = _run(tmp_path, spec, nproc, "--steps", str(STEPS))
    assert _diff(losses, single["seed0"]) <= TOL


@pytest.mark.parametrize("spec", ["fsdp", pytest.param("deepspeed:zero3", marks=requires("deepspeed"))])
def test_rank_1_never_holds_more_than_its_shard_and_one_block(tmp_path, spec):
    """Built and prepared, the model alone (an optimizer's own state is advise's business, not initialisation's):
    430 MB in blocks of 108 MB, so that the RSS's few MB of noise cannot decide the bound."""
    _, setup = _run(tmp_path, spec, 2, *BIG, "--steps", "0", "--model-only")
    rank1 = setup[1]
    assert rank1["shard_bytes"] <= 0.51 * rank1["model_bytes"], rank1
    assert rank1["setup_peak_bytes"] <= 1.1 * (rank1["shard_bytes"] + rank1["largest_block_bytes"]), rank1


def test_without_init_module_rank_1_holds_the_whole_model(tmp_path):
    """The control: the same measurement exceeds the bound when the model is built as usual."""
    _, setup = _run(tmp_path, "fsdp", 2, *BIG, "--steps", "0", "--model-only", "--eager")
    rank1 = setup[1]
    assert rank1["build_peak_bytes"] >= 0.95 * rank1["model_bytes"], rank1
    assert rank1["setup_peak_bytes"] > 1.1 * (rank1["shard_bytes"] + rank1["largest_block_bytes"]), rank1


@pytest.mark.parametrize(("spec", "nproc"), [
    ("fsdp", 2),
    pytest.param("deepspeed:zero3", 2, marks=requires("deepspeed")),
    ("ddp", 2),  # a replicating method: init_module changes nothing
])
def test_a_state_dict_loaded_before_prepare_reaches_every_rank(tmp_path, single, spec, nproc):
    """The model is built from seed 0 and loaded with seed 1's weights: every rank must train seed 1's curve (a rank
    that kept its seed-0 shard, or the meta shapes, would not)."""
    losses, _ = _run(tmp_path, spec, nproc, "--steps", "20", "--load", str(single["init"]))
    assert _diff(losses, single["seed1"]) <= TOL
    assert _diff(losses, single["seed0"][:20]) > 1e-2


def test_init_module_after_prepare_is_one_clear_error(tmp_path):
    script = tmp_path / "late.py"
    script.write_text("import torch, paratrain as pt\n"
                      "s = pt.Session()\n"
                      "m, _, _ = s.prepare(torch.nn.Linear(2, 2))\n"
                      "with s.init_module():\n"
                      "    pass\n")
    proc = paratrain("run", "-s", "single", str(script))
    assert proc.returncode != 0
    assert "prepare() was already called" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
