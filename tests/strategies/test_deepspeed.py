"""DeepSpeed ZeRO behind the Session: the same curve as one process, checkpoints across methods and world sizes,
its config checked before any process starts. Real DeepSpeed on CPU (gloo); `make test` installs it."""

import json
import os

import pytest

from tests.helpers.equivalence import assert_equivalent, train
from tests.helpers.launch import ROOT, SESSION_TRAIN, check, max_diffs, paratrain

pytestmark = pytest.mark.multiprocess
if os.environ.get("CI") != "true":  # in CI it must be there (make test installs it): a missing one fails
    pytest.importorskip("deepspeed")

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"


# ZeRO 1-3 ×2 with AdamW, accumulation, an uneven last batch and a resumed checkpoint: tests/strategies/
# test_conformance.py (compare's default cells). Stage 0 is not among them.
def test_zero0_matches_one_process_with_sgd(tmp_path, reference):
    run = train("deepspeed:zero0", 2, tmp_path, "sgd")
    assert_equivalent(reference("sgd"), run)


def test_zero3_with_everything_offloaded_matches(tmp_path, reference):
    run = train("deepspeed:zero3,offload=all", 2, tmp_path, "adamw")
    assert_equivalent(reference("adamw"), run)


def test_a_ddp_checkpoint_resumes_under_zero2(tmp_path, reference):
    """Loading into DeepSpeed's engine. (DeepSpeed's own checkpoints resume under single in
    tests/strategies/test_conformance.py, and every replicating method loads them the same way.)"""
    ref = reference("adamw")
    train("ddp", 2, tmp_path / "ddp100", "adamw", 100, "--save", str(tmp_path / "ddp_ckpt"))
    resumed = train("deepspeed:zero2", 2, tmp_path / "z2", "adamw", 200, "--load", str(tmp_path / "ddp_ckpt"))
    loss, weight = max_diffs(ref, resumed, offset=100)  # the resumed run's 100 steps vs the last 100
    assert loss <= 1e-5 and weight <= 1e-5, (loss, weight)


def test_a_bad_deepspeed_config_is_one_line_before_any_process(tmp_path):
    typo = tmp_path / "typo.json"
    typo.write_text('{"zero_optimisation": {"overlap_comm": true}}')
    owned = tmp_path / "owned.json"
    owned.write_text('{"gradient_clipping": 1.0}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"zero_optimization": {"reduce_bucket_sise": 5}}')
    for file, words in ((typo, 'Did you mean "zero_optimization"'), (owned, "--grad-clip"),
                        (bad, "reduce_bucket_sise")):
        proc = paratrain("run", "-s", f"deepspeed:zero2,config={file}", "-n", "2", str(SESSION_TRAIN))
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_dry_run_prints_the_final_config_without_deepspeeds_own_clipping(tmp_path):
    proc = check(paratrain("run", "-s", "deepspeed:zero3", "-n", "2", "--dry-run", "--json", str(SESSION_TRAIN)))
    config = json.loads(proc.stdout)["deepspeed_config"]
    assert config["zero_optimization"]["stage"] == 3 and config["gradient_clipping"] == 0.0


def test_a_native_deepspeed_script_runs_unchanged_and_matches_one_process(tmp_path, reference):
    """examples/handwritten/deepspeed.py calls deepspeed.initialize itself and builds its optimizer from its config:
    paratrain runs it as the deepspeed launcher would."""
    script = SESSION_TRAIN.parent / "handwritten" / "deepspeed.py"
    check(paratrain("run", "--strategy", "deepspeed", "--nproc", "2", str(script), "--steps", "200", "--out",
                    str(tmp_path / "native")))
    assert_equivalent(reference("sgd"), tmp_path / "native")


def test_a_native_script_gets_the_local_rank_argument_a_session_script_does_not(tmp_path):
    script = SESSION_TRAIN.parent.parent / "tests" / "helpers" / "scripts" / "ds_native_args.py"
    check(paratrain("run", "--strategy", "deepspeed:zero1", "--nproc", "2", str(script), str(tmp_path)))
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["local_rank"] for s in seen] == [0, 1] == [s["env"] for s in seen]
    assert seen[0]["argv"] == [str(tmp_path), "--local_rank=0"]
    plan = json.loads(check(paratrain("run", "-s", "deepspeed", "-n", "2", "--dry-run", "--json",
                                      str(SESSION_TRAIN))).stdout)
    assert "PARATRAIN_LOCAL_RANK_ARG" not in plan["env"]  # Session scripts: nothing appended


def test_a_native_scripts_own_stage_wins_and_the_last_line_says_so(tmp_path):
    """deepspeed:zero1 cannot reach a config the script passes to deepspeed.initialize itself: the job says which
    config ran (noted by the workers at run time) and reports the stage that ran, not the one asked for."""
    script = str(SCRIPTS / "ds_native_args.py")
    proc = check(paratrain("run", "-s", "deepspeed:zero1", "-n", "2", script, str(tmp_path), "--zero", "3"))
    lines = proc.stderr.strip().splitlines()
    assert "the script's own config ran ZeRO stage 3; deepspeed:zero1 was not applied" in lines[-2], proc.stderr
    assert "deepspeed (the script's own config: ZeRO stage 3) × 2 processes (CPU) finished in" in lines[-1]
    assert "zero_stage=1" not in lines[-1]
    # the stage asked for is the one that ran: no conflict line, and the last line still says whose config it was
    proc = check(paratrain("run", "-s", "deepspeed:zero1", "-n", "2", script, str(tmp_path), "--zero", "1"))
    assert "not applied" not in proc.stderr, proc.stderr
    assert "deepspeed (the script's own config: ZeRO stage 1) × 2 processes" in proc.stderr.strip().splitlines()[-1]


def test_dry_run_of_a_native_script_says_its_own_config_is_used(tmp_path):
    proc = check(paratrain("run", "-s", "deepspeed:zero1", "-n", "2", "--dry-run", "--json",
                           str(SCRIPTS / "ds_native_args.py"), str(tmp_path)))
    config = json.loads(proc.stdout)["deepspeed_config"]
    assert isinstance(config, str) and "passes its config to deepspeed.initialize" in config and "Session" in config
    text = check(paratrain("run", "-s", "deepspeed:zero1", "-n", "2", "--dry-run", str(SCRIPTS / "ds_native_args.py"),
                           str(tmp_path))).stdout
    assert "gradient_clipping" not in text and "the script's own" in text


def test_a_script_calling_only_init_distributed_gets_the_local_rank_argument(tmp_path):
    check(paratrain("run", "-s", "deepspeed", "-n", "2", str(SCRIPTS / "ds_init_only.py"), str(tmp_path)))
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [s["local_rank"] for s in seen] == [0, 1] and {s["world"] for s in seen} == {2}


def test_without_deepspeed_the_error_names_the_install_command(tmp_path):
    """DeepSpeed made unimportable for this one process (a finder ahead of the real ones refuses it), as on a
    machine without the extra: one line with the pip command, before any worker starts."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'deepspeed' or name.startswith('deepspeed.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'deepspeed'\")\n"
        "sys.meta_path.insert(0, Hide())\n")
    from tests.helpers.launch import worker_env

    env = worker_env(PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = paratrain("run", "-s", "deepspeed:zero2", "-n", "2", str(SESSION_TRAIN), env=env)
    assert proc.returncode != 0 and 'pip install "paratrain[deepspeed]"' in proc.stderr, proc.stderr
    assert "DeepSpeed is not installed" in proc.stderr and "Traceback" not in proc.stderr


def test_a_bare_zero3_script_evaluates_a_stock_transformer_encoder_with_a_padding_mask(tmp_path):
    """Its own deepspeed.initialize gets what a Session's does: nested tensors off where ZeRO-3 hooks the attention
    (else the first evaluation fails: MultiheadAttention does not support NestedTensor outside of its fast path)."""
    proc = check(paratrain("run", "-s", "deepspeed", "-n", "2", str(SCRIPTS / "ds_native_encoder.py"), str(tmp_path),
                           timeout=300))
    assert "turned nested tensors off there" in proc.stderr and "encoder (nn.TransformerEncoder)" in proc.stderr
    losses = [json.loads((tmp_path / f"eval{r}.json").read_text())["loss"] for r in (0, 1)]
    assert losses[0] == losses[1] and losses[0] > 0
