"""The CLI shell: one-line errors with exit code 2, --version, --help, and the doctor/strategies reports."""

from __future__ import annotations

import json

import pytest

from paratrain import __version__
from paratrain.cli._render import help_text
from tests.helpers.launch import paratrain, worker_env

# What doctor reports, not how fast: its 20 s per backend check is for a user's idle machine, and a loaded one (two
# test workers, each starting processes) once took longer than that to import TensorFlow.
PATIENT = ("--timeout", "120")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bogus"], "No such command 'bogus'"),
        (["gpus", "--frobnicate"], "No such option: --frobnicate"),
        (["doctor", "--timeout", "soon"], "Invalid value"),
        (["--json"], "No such option: --json"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    proc = paratrain(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert lines[0].startswith("paratrain: error:")


def test_version_and_help():
    assert paratrain("--version").stdout.strip() == f"paratrain {__version__}"
    help_text = paratrain("--help").stdout
    for command in ("gpus", "doctor", "strategies", "run"):
        assert command in help_text


def test_doctor_json_reports_every_method_and_backend():
    proc = paratrain("doctor", "--json", *PATIENT)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    methods = {m["name"]: m for m in report["methods"]}
    assert list(methods) == ["single", "dp", "ddp", "fsdp", "tp", "fsdp+tp", "pp", "deepspeed", "horovod",
                             "mirrored", "multiworker"]
    assert methods["pp"]["status"] == "available" and "pipelining" in methods["pp"]["reason"]
    assert methods["ddp"]["status"] == "available" and "gloo" in methods["ddp"]["reason"]
    assert methods["deepspeed"]["status"] == "available"  # make test installs it
    assert methods["horovod"]["status"] == "available"  # make test builds it (paratrain setup horovod)
    assert methods["mirrored"]["status"] == "available" and methods["multiworker"]["status"] == "available"
    components = {c["name"]: c for c in report["components"]}
    assert "accelerator: cpu (gloo)" in components["DeepSpeed"]["detail"], components["DeepSpeed"]
    assert components["torch"]["version"].startswith("2.")
    assert components["gloo"]["version"] == "built in"
    assert {"CUDA", "NCCL", "DeepSpeed", "Horovod", "TensorFlow"} <= set(components)
    horovod = components["Horovod"]["detail"]  # what `horovodrun --check-build` says, and the torch it was built for
    assert "controllers: Gloo" in horovod and "tensor ops: Gloo" in horovod and "built for torch 2." in horovod
    assert "TensorFlow/Keras (built for TensorFlow 2." in horovod  # make test builds the Keras binding too
    assert methods["horovod"]["framework"] == "torch, tensorflow"


def test_doctor_table_has_fix_commands():
    proc = paratrain("doctor", *PATIENT, env={**worker_env(), "COLUMNS": "200"})
    assert proc.returncode == 0
    assert "Methods" in proc.stdout and "Backends" in proc.stdout
    # TensorFlow's facts: the Keras it has, tf_keras for multiworker fit, the devices it sees
    assert "Keras 3." in proc.stdout and "tf_keras 2." in proc.stdout and "CPU" in proc.stdout


def test_strategies_lists_names_launchers_and_options():
    rows = json.loads(paratrain("strategies", "--json").stdout)
    by_name = {r["name"]: r for r in rows}
    assert by_name["fsdp"]["launcher"] == "torchrun" and "shard=full|grad_op|none" in by_name["fsdp"]["options"]
    assert by_name["single"]["implemented"] is True and by_name["mirrored"]["implemented"] is True
    assert "collective=auto|ring|nccl" in by_name["multiworker"]["options"]
    assert by_name["horovod"]["launcher"] == "horovodrun" and "fp16 = compression=fp16" in by_name["horovod"]["options"]
    assert by_name["horovod"]["frameworks"] == "torch, tensorflow" and by_name["ddp"]["frameworks"] == "torch"
    assert "zero3 = zero_stage=3" in by_name["deepspeed"]["options"]  # the shorthand users type is listed


def test_help_prose_is_rewrapped_and_examples_keep_their_lines():
    text = ("First line.\n\nA paragraph written\nover two lines.\n\n"
            "Examples:\n  paratrain run a.py\n  paratrain run b.py\n")
    assert help_text(text) == ("First line.\n\nA paragraph written over two lines.\n\n"
                               "Examples:\n  paratrain run a.py\n  paratrain run b.py")
