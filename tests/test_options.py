"""Training options: one meaning under every method (real 2-process runs), one place to say them, and conflicts
between the script and the launcher refused."""

from __future__ import annotations

import json

import pytest
import torch

import paratrain as pt
from paratrain import options
from paratrain.distenv import TRAIN_VAR
from paratrain.errors import ConfigError
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain
from tests.helpers.requirements import requires

SCRIPT = ROOT / "tests" / "helpers" / "scripts" / "options_train.py"
METHODS = [("ddp", 2), ("fsdp", 2), ("dp", 1)]
FP32_TOL = 1e-5
# bf16 keeps 8 significant bits: one rounding of a value near 1 moves it by up to 2^-9 ≈ 2e-3. Splitting the batch
# over ranks changes which bf16 roundings happen (a weight gradient summed over 16 rows, then all-reduced in fp32,
# instead of over 32 rows), so runs may differ by a few such roundings: 1e-2 is about five, on losses near 0.5–1.4
# and weights near 0.1–1. Measured: 4.5e-4 (losses) and 2.7e-4 (weights) after 30 steps.
BF16_TOL = 1e-2


def _run(tmp_path, strategy: str, nproc: int, *flags: str, cwd=None, steps: int = 30) -> dict:
    out = tmp_path / f"{strategy}{nproc}-{'-'.join(f.strip('-') for f in flags)}-{steps}steps"
    check(paratrain("run", "-s", strategy, "-n", str(nproc), *flags, str(SCRIPT), str(out), str(steps), cwd=cwd))
    data = json.loads((out / "losses.json").read_text())
    data["weights"] = torch.load(out / "weights.pt", weights_only=True)
    return data


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """``_run``, once per distinct training (method, processes, flags, steps) in this file: the tests that need the
    same run (the clipped single and fsdp×2 runs, the bf16 single runs) share it instead of training it again."""
    root = tmp_path_factory.mktemp("options")
    done: dict[tuple, dict] = {}

    def cached(strategy: str, nproc: int, *flags: str, steps: int = 30) -> dict:
        key = (strategy, nproc, flags, steps)
        if key not in done:
            done[key] = _run(root, strategy, nproc, *flags, steps=steps)
        return done[key]

    return cached


def _diffs(a: dict, b: dict) -> tuple[float, float]:
    loss = max(abs(x - y) for x, y in zip(a["losses"], b["losses"], strict=True))
    weight = max((a["weights"][k] - b["weights"][k]).abs().max().item() for k in a["weights"])
    return loss, weight


# tests/strategies/test_precision_matrix.py runs bf16-mixed under ddp and fsdp, and bf16-true under fsdp, on a
# transformer: here the precisions run under the other methods.
PRECISION_METHODS = {"bf16-mixed": [("dp", 1), ("pp", 2)], "bf16-true": [("ddp", 2), ("dp", 1)]}


@pytest.mark.multiprocess
@pytest.mark.parametrize(("flags", "tol"), [
    (("--precision", "bf16-mixed"), BF16_TOL),
    (("--precision", "bf16-true"), BF16_TOL),  # weights in bf16 too: measured 1.3e-3 (loss), 2.0e-3 (weights)
    (("--grad-clip", "0.5"), FP32_TOL),
], ids=["bf16-mixed", "bf16-true", "grad-clip"])
def test_each_option_means_the_same_under_every_method(run, flags, tol):
    """Every run here is seeded (--seed 3), so the seed's own meaning under every method is checked with each."""
    flags = ("--seed", "3", *flags)
    single = run("single", 1, *flags)
    assert single["options"][flags[-2].strip("-").replace("-", "_")] is not None
    for strategy, nproc in PRECISION_METHODS.get(flags[-1], METHODS):
        loss, weight = _diffs(single, run(strategy, nproc, *flags))
        assert loss <= tol and weight <= tol, f"{strategy}×{nproc} {flags}: loss {loss:.3g}, weights {weight:.3g}"


@pytest.mark.multiprocess
def test_bf16_really_runs_in_bf16(run):
    fp32 = run("single", 1, "--seed", "3")
    bf16 = run("single", 1, "--seed", "3", "--precision", "bf16-mixed")
    true = run("single", 1, "--seed", "3", "--precision", "bf16-true")
    assert _diffs(fp32, bf16)[0] > FP32_TOL  # autocast rounded something
    assert true["dtype"] == "torch.bfloat16" and fp32["dtype"] == "torch.float32"
    assert abs(true["losses"][-1] - fp32["losses"][-1]) < 0.05  # the same training, in 8 bits


@pytest.mark.multiprocess
def test_clipping_a_sharded_model_clips_the_global_norm(run):
    single = run("single", 1, "--seed", "3", "--grad-clip", "0.5")
    assert all(n > 0.5 for n in single["norms"][:3])  # clipping is active from the first step
    for strategy in ("fsdp", "pp"):  # not a shard's norm, nor a pipeline stage's
        split = run(strategy, 2, "--seed", "3", "--grad-clip", "0.5")
        assert max(abs(a - b) for a, b in zip(single["norms"], split["norms"], strict=True)) < 1e-5, strategy
        assert _diffs(single, split)[1] <= FP32_TOL, strategy


@pytest.mark.multiprocess
def test_seed_decides_initial_weights_and_data_order(run):
    a = run("single", 1, "--seed", "3")  # the bf16 test's fp32 run
    b = run("single", 1, "--seed", "2", steps=2)
    assert a["losses"][0] != b["losses"][0]


@pytest.mark.multiprocess
def test_compile_from_the_config_file_matches_under_every_compilable_method(tmp_path):
    (tmp_path / "paratrain.toml").write_text('compile = "aot_eager"\nseed = 3\n')
    single = _run(tmp_path, "single", 1, cwd=tmp_path)
    assert single["options"]["compile"] == "aot_eager"
    for strategy in ("ddp", "fsdp"):
        loss, weight = _diffs(single, _run(tmp_path, strategy, 2, cwd=tmp_path))
        assert loss <= FP32_TOL and weight <= FP32_TOL, strategy
    proc = paratrain("run", "-s", "dp", str(SCRIPT), str(tmp_path / "dp"), cwd=tmp_path)
    assert proc.returncode == 2 and "dp cannot be compiled with torch.compile" in proc.stderr


@requires("torch", gpus=1)
def test_fp16_grad_scaler_state_survives_save_and_load(tmp_path):
    first = tmp_path / "first"
    check(paratrain("run", "-s", "single", "--precision", "fp16-mixed", str(SESSION_TRAIN), "--steps", "20",
                    "--save", str(tmp_path / "ckpt"), "--out", str(first)))
    state = torch.load(tmp_path / "ckpt" / "trainer_state.pt", weights_only=True)
    assert state["scaler"]["scale"] > 0
    check(paratrain("run", "-s", "ddp", "-n", "1", "--precision", "fp16-mixed", str(SESSION_TRAIN), "--steps", "25",
                    "--load", str(tmp_path / "ckpt"), "--out", str(tmp_path / "second")))


def test_fp16_on_cpu_names_what_works_here():
    proc = paratrain("run", "-s", "single", "--precision", "fp16-mixed", str(SCRIPT), "/tmp/unused")
    assert proc.returncode == 2 and "fp16-mixed needs a GPU" in proc.stderr and "bf16-mixed" in proc.stderr


def test_script_and_launcher_disagreeing_is_an_error():
    proc = paratrain("run", "-s", "single", "--grad-accum", "2", str(SESSION_TRAIN), "--grad-accum", "4",
                     "--steps", "2")
    assert proc.returncode == 2
    assert "Session(grad_accum=4) in the script, but paratrain run was given --grad-accum 2" in proc.stderr


def test_resolve_agreeing_values_and_defaults():
    opts = options.resolve({"precision": "bf16-mixed", "seed": None}, {"precision": "bf16-mixed", "grad_clip": 1})
    assert (opts.precision, opts.grad_clip, opts.seed, opts.compile_backend) == ("bf16-mixed", 1, None, None)
    assert options.TrainOptions(compile=True).compile_backend == "inductor"
    assert options.from_env(options.to_env({"grad_accum": 4, "seed": None})) == {"grad_accum": 4}


def test_activation_checkpointing_has_one_value_per_mode():
    """True (the option's value before it had modes) is full and "none" is False, wherever the value comes from, so
    a script's Session(activation_checkpointing=True) agrees with the launcher's bare --activation-checkpointing."""
    assert options.TrainOptions(activation_checkpointing=True).activation_checkpointing == "full"
    assert options.TrainOptions(activation_checkpointing="none").activation_checkpointing is False
    assert options.given({"activation_checkpointing": "Every:2"}) == {"activation_checkpointing": "every:2"}
    assert options.resolve({"activation_checkpointing": True},
                           {"activation_checkpointing": "full"}).activation_checkpointing == "full"
    with pytest.raises(ConfigError, match=r"Session\(activation_checkpointing='op'\) in the script"):
        options.resolve({"activation_checkpointing": "op"}, {"activation_checkpointing": "every:2"})
    env = options.to_env({"activation_checkpointing": "op"})
    assert options.from_env(env) == {"activation_checkpointing": "op"}


@pytest.mark.parametrize(("values", "needle"), [
    ({"precision": "bf16"}, "is not one of fp32, bf16-mixed"), ({"grad_clip": 0}, "must be a positive number"),
    ({"grad_clip": float("inf")}, "must be a positive number"), ({"grad_accum": 0}, "must be 1 or more"),
    ({"seed": -1}, "between 0 and 2**32-1"), ({"compile": ""}, "backend name"),
    ({"precison": "fp32"}, 'Did you mean "precision"'),
    ({"activation_checkpointing": "every:0"}, "is not a mode: none, full, op or every:N"),
    ({"activation_checkpointing": "every:x"}, "is not a mode"), ({"activation_checkpointing": 1}, "is not a mode")])
def test_bad_values(values, needle):
    with pytest.raises(ConfigError, match=needle.replace("*", r"\*").replace("(", r"\(")):
        options.given(values)


def test_fsdp_mixed_precision_option_points_to_the_training_option():
    from paratrain.strategies import registry

    with pytest.raises(ConfigError, match="--precision bf16-mixed"):
        registry.resolve("fsdp:mixed_precision=bf16")


# A value other than the default for every option: a new TrainOptions field must be added here, and then reaches the
# workers from a flag and from paratrain.toml, and is a Session() keyword, without being written anywhere else.
NOT_DEFAULT = {"precision": "bf16-mixed", "grad_clip": 0.5, "compile": True, "seed": 7, "grad_accum": 3,
               "per_rank_batch": True, "sync_batchnorm": False, "activation_checkpointing": "op"}


def _as_flags(values: dict) -> list[str]:
    out = []
    for name, value in values.items():
        on, _, off = options.FLAGS[name].partition("/")
        out += [on if value else off] if isinstance(value, bool) else [on, str(value)]
    return out


def test_every_training_option_reaches_the_workers_from_a_flag_the_file_and_session(tmp_path):
    """Declared once in TrainOptions; the flags, the file's keys and Session's keywords are made from it (an option
    once reached the file but not Session())."""
    import inspect

    from paratrain.launcher.config import load_config, merge

    assert set(NOT_DEFAULT) == set(options.FIELDS)
    defaults = options.TrainOptions()
    assert all(getattr(defaults, k) != v for k, v in NOT_DEFAULT.items())

    plan = json.loads(check(paratrain("run", "-s", "ddp", "-n", "2", "--dry-run", "--json", *_as_flags(NOT_DEFAULT),
                                      str(SESSION_TRAIN))).stdout)
    assert {k: plan["config"][k] for k in NOT_DEFAULT} == NOT_DEFAULT
    assert json.loads(plan["env"][TRAIN_VAR]) == NOT_DEFAULT

    toml = tmp_path / "paratrain.toml"
    toml.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in NOT_DEFAULT.items()))
    assert merge(load_config(str(toml)), {}).train_options() == NOT_DEFAULT

    params = inspect.signature(pt.Session).parameters
    assert all(params[name].default is None and params[name].kind is inspect.Parameter.KEYWORD_ONLY
               for name in NOT_DEFAULT)
    with pytest.raises(ConfigError, match=r'unknown training option "grad_acum".*grad_accum'):
        pt.Session("single", grad_acum=2)
