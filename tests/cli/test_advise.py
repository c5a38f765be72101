"""``paratrain advise`` through the real entry point: flags only on this GPU-less machine, and this machine's GPUs
(count, memory, NVLink, bf16) through the fake NVML at the hardware boundary."""

from __future__ import annotations

import json

import pytest

from paratrain.cli.main import main
from paratrain.devices import inventory
from tests.helpers.fake_pynvml import FakeNvml


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("PARATRAIN_HOME", str(tmp_path))  # no history: estimates only
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _json(capsys, *argv: str) -> dict:
    assert main(["advise", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_table_and_recommendation(capsys):
    assert main(["advise", "--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "24", "--micro-batch", "2",
                 "--precision", "bf16-mixed"]) == 0
    out = capsys.readouterr().out
    assert "gpt2-xl (GPT-2 XL): 1,557,611,200 parameters" in out
    assert "Memory per GPU" in out and "How each one runs" in out
    assert "Recommendation" in out and "1. fsdp:shard=grad_op: fits" in out  # ddp needs 34.7 GiB of 21.6


def test_json_contract(capsys):
    result = _json(capsys, "--params", "1.3e9", "--gpus", "8", "--gpu-mem", "80")
    assert result["recommendation"][0] == "ddp"
    specs = [m["method"] for m in result["methods"]]
    assert {"ddp", "fsdp:shard=grad_op", "deepspeed:zero2", "horovod", "multiworker"} <= set(specs)
    ddp = result["methods"][specs.index("ddp")]
    assert ddp["per_rank_bytes"]["params"] == 4 * 1_300_000_000  # fp32 without a bf16 GPU here
    assert ddp["comm_bytes_per_step"] == round(2 * 4 * 1.3e9 * 7 / 8)
    assert result["plan"]["precision"] == "fp32" and result["plan"]["hardware_from"] == "flags"


def test_nothing_fits_says_so(capsys):
    assert main(["advise", "--model", "llama-70b", "--gpus", "8", "--gpu-mem", "40", "--host-mem", "64"]) == 0
    out = capsys.readouterr().out
    assert "Nothing fits" in out and "What would make it fit" in out


def test_hardware_from_this_machine(monkeypatch, capsys):
    fake = FakeNvml(4, nvlinks={(a, b): 4 for a in range(4) for b in range(a + 1, 4)})
    monkeypatch.setattr(inventory, "nvml_module", lambda: fake)
    result = _json(capsys, "--model", "gpt2")
    plan = result["plan"]
    assert (plan["gpus_per_node"], plan["gpu_mem_gib"], plan["hardware_from"]) == (4, 80.0, "this machine")
    assert plan["interconnect"]["name"] == "nvlink" and plan["precision"] == "bf16-mixed"
    assert main(["advise", "--model", "gpt2", "--gpus", "8"]) == 2
    assert "this machine has 4 visible GPU(s)" in capsys.readouterr().err


def test_probe_measures_the_link(capsys):
    result = _json(capsys, "--params", "1e8", "--gpus", "2", "--gpu-mem", "16", "--probe")
    assert result["plan"]["interconnect"]["name"].startswith("measured (gloo")


def test_factory_model(capsys):
    result = _json(capsys, "--model", "tests.helpers.advise_models:wide_mlp", "--gpus", "2", "--gpu-mem", "16")
    assert result["model"]["params"] == 4096 * 4096 * 3 + 4096 * 3 and result["model"]["shapes_known"]
    assert main(["advise", "--model", "tests.helpers.advise_models:not_a_module", "--gpus", "2",
                 "--gpu-mem", "16"]) == 2
    assert "not a torch.nn.Module" in capsys.readouterr().err


MY_MODEL = """import torch


def build():
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
"""


def _paratrain_command(tmp_path, *argv: str):
    """`paratrain …` as the installed command runs it: a script in another folder (the command's bin folder) first
    on sys.path, not the current folder as under `python -m` — which is where `--model mymodel:build` failed."""
    import subprocess
    import sys

    from tests.helpers.launch import worker_env

    command = tmp_path / "bin" / "paratrain_command.py"
    command.parent.mkdir()
    command.write_text("from paratrain.cli.main import entry\n\nentry()\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "mymodel.py").write_text(MY_MODEL)
    return subprocess.run([sys.executable, str(command), "advise", *argv], capture_output=True, text=True,
                          cwd=work, env=worker_env(), timeout=120)


def test_factory_in_the_current_folder_is_importable(tmp_path):
    proc = _paratrain_command(tmp_path, "--model", "mymodel:build", "--gpus", "2", "--gpu-mem", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["params"] == 64 * 32 + 32 + 32 * 10 + 10


def test_a_module_that_is_not_there_is_still_one_clear_line(tmp_path):
    proc = _paratrain_command(tmp_path, "--model", "nomodel:build", "--gpus", "2", "--gpu-mem", "8")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert '--model "nomodel:build": cannot import it: no module named nomodel' in line
    assert str(tmp_path / "work") in line, line  # where it was looked for


def test_a_misspelt_factory_name_is_named(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymodel_misspelt.py").write_text(MY_MODEL)
    assert main(["advise", "--model", "mymodel_misspelt:buidl", "--gpus", "2", "--gpu-mem", "8"]) == 2
    assert 'mymodel_misspelt has no "buidl". Did you mean "build"?' in capsys.readouterr().err


def test_a_no_in_the_fits_column_says_which_memory_and_why(capsys):
    assert main(["advise", "--params", "1.3e9", "--gpus", "8", "--gpu-mem", "80", "--host-mem", "16"]) == 0
    out = capsys.readouterr().out
    assert "host memory 16 GiB per node" in out and "(72 usable)" in out
    offload = next(ln for ln in out.splitlines() if ln.strip().startswith("ds:zero3+off(all)"))
    assert offload.rstrip().endswith("no (host)"), offload
    assert ("no (host) ds:zero3+off(all): offloaded state needs 24.2 GiB of host memory per node (8 ranks × 3.03 "
            "GiB), 14.4 GiB usable of 16 GiB") in out
    assert "n/a multiworker (tf), mirrored (tf): a tensorflow method" in out


# The advise figures the docs quote, by the command that gives them: (arguments, [(method label, field)]). A change
# to the memory model that moves one fails here, naming the doc to update, instead of leaving the docs behind.
DOCUMENTED = [
    (["--params", "1.3e9", "--gpus", "8", "--gpu-mem", "80"], [("ddp", "total")]),
    (["--model", "gpt2-xl", "--gpus", "4", "--gpu-mem", "24", "--precision", "bf16-mixed", "--micro-batch", "2"],
     [("ddp", "total"), ("fsdp:grad_op", "total"), ("fsdp", "total")]),
    (["--model", "llama-7b", "--gpus", "8", "--gpu-mem", "24", "--precision", "bf16-mixed", "--micro-batch", "2",
      "--checkpointing"],
     [("ddp", "total"), ("fsdp:grad_op", "total"), ("fsdp", "total"), ("ds:zero2+off(o)", "total"),
      ("ds:zero2+off(o)", "host")]),
    (["--model", "llama-70b", "--gpus", "8", "--gpu-mem", "80", "--precision", "bf16-mixed"],
     [("fsdp", "activations")]),
    (["--model", "llama-13b", "--gpus", "8", "--gpu-mem", "80", "--interconnect", "nvlink", "--seq-len", "4096",
      "--micro-batch", "4", "--precision", "bf16-mixed", "--checkpointing"],
     [("tp", "total"), ("fsdp", "total"), ("fsdp+tp", "total"), ("pp:1f1b", "total")]),
    (["--model", "llama-70b", "--gpus", "8", "--gpu-mem", "80", "--nodes", "4", "--interconnect", "infiniband",
      "--seq-len", "4096", "--micro-batch", "1", "--precision", "bf16-mixed", "--checkpointing"],
     [("fsdp", "total"), ("fsdp+tp", "total")]),
]


@pytest.mark.parametrize(("argv", "figures"), DOCUMENTED, ids=[" ".join(argv[:2]) for argv, _ in DOCUMENTED])
def test_the_figures_the_docs_quote_are_what_advise_prints(capsys, argv, figures):
    from paratrain.cli.advise import _g
    from tests.helpers.launch import ROOT

    text = " ".join((ROOT / "docs" / "choosing-a-method.md").read_text().split())
    methods = {m["label"]: m["per_rank_bytes"] for m in _json(capsys, *argv)["methods"]}
    for label, field in figures:
        quoted = f"{_g(methods[label][field])} GiB"
        assert quoted in text, f"docs/choosing-a-method.md should quote {label} {field} = {quoted} for {argv}"
    if "llama-7b" in argv:  # the README's advise example
        readme = " ".join((ROOT / "README.md").read_text().split())
        ddp, grad_op, fsdp = (_g(methods[k]["total"]) for k in ("ddp", "fsdp:grad_op", "fsdp"))
        assert f"ddp needs {ddp} GiB per GPU, `fsdp:shard=grad_op` {grad_op}, `fsdp` {fsdp})" in readme


def test_checkpointing_takes_a_mode_and_the_header_says_it(capsys):
    """--checkpointing alone is full, as it was before modes; op and every:N size those modes, between none and full
    (Llama 3.1 8B on 8 GPUs, the question advise exists for); the header names the mode."""
    common = ["--model", "llama3.1-8b", "--gpus", "8", "--gpu-mem", "80", "--seq-len", "8192", "--micro-batch", "2",
              "--precision", "bf16-mixed"]
    act = {}
    for mode in ("none", "full", "op", "every:2"):
        result = _json(capsys, *common, "--checkpointing", mode)
        assert result["plan"]["checkpointing"] == (False if mode == "none" else mode)
        act[mode] = next(r for r in result["methods"] if r["method"] == "fsdp")["per_rank_bytes"]["activations"]
    assert act["full"] < act["op"] < act["none"] and act["full"] < act["every:2"] < act["none"]
    assert _json(capsys, *common, "--checkpointing")["plan"]["checkpointing"] == "full"  # bare, last
    assert _json(capsys, "--checkpointing", *common)["plan"]["checkpointing"] == "full"  # bare, before a flag
    assert main(["advise", *common, "--checkpointing", "op"]) == 0
    assert "sequence 8192, selective (per-op) activation checkpointing" in capsys.readouterr().out
    assert main(["advise", *common, "--checkpointing", "every:0"]) == 2
    assert 'activation checkpointing "every:0" is not a mode: none, full, op or every:N' in capsys.readouterr().err


def test_each_method_has_its_allocated_and_reserved_peak(capsys):
    """The 8-GPU question for Llama 3.1 8B (torchtitan's benchmark: FSDP, micro-batch 2 × 8,192 tokens, per-op
    selective checkpointing): the tensors' peak and the caching allocator's, which runs out first — 69.3 and 79.1 GiB
    for fsdp, beyond the 72 GiB usable of an 80 GB GPU (torchtitan published 82.4 GiB reserved on 96 GB H100s)."""
    from paratrain.advise import gpu_memory, memory, methods, models

    common = ["--model", "llama3.1-8b", "--gpus", "8", "--gpu-mem", "80", "--seq-len", "8192", "--micro-batch", "2",
              "--precision", "bf16-mixed", "--checkpointing", "op"]
    rows = {r["label"]: r["per_rank_bytes"] for r in _json(capsys, *common)["methods"]}
    spec = models.from_preset("llama3.1-8b")
    plan = memory.Plan(ranks=8, micro_batch=2, seq_len=8192, precision="bf16-mixed", checkpointing="op")
    gap = gpu_memory.fragmentation_bytes(spec, plan)
    assert rows["fsdp"]["reserved"] == rows["fsdp"]["total"] + gap and gap > 0
    assert rows["fsdp"]["total"] < memory.USABLE * 80 * 2**30 < rows["fsdp"]["reserved"]
    assert rows["fsdp"]["total"] == memory.rank_memory(spec, methods.get("fsdp").sharding, plan).total
    assert main(["advise", *common]) == 0
    assert "reserved" in capsys.readouterr().out
