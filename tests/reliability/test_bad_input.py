"""The bad-input catalogue: every mistake is one line naming the problem and the fix, a non-zero exit (2 for usage
errors), no traceback from paratrain's own frames, and no file of the user's overwritten."""

import shutil
import socket
import sys
from types import SimpleNamespace

import pytest

from paratrain.cli.main import main
from tests.helpers.launch import ROOT, SESSION_TRAIN, paratrain, python

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
CKPT = str(SCRIPTS / "ckpt_cases.py")
S = str(SESSION_TRAIN)


def one_line_error(proc, code: int, *needles: str) -> str:
    """Assert the shape every bad input must have; returns the error line."""
    assert proc.returncode == code, f"exit {proc.returncode}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("paratrain: error")]
    assert errors, proc.stderr
    line = errors[-1]
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


# (case, argv, exit code, words the one line must contain)
CLI_CASES = [
    ("unknown method", ["run", "-s", "fsdpp", S], 2, ['unknown strategy "fsdpp"', 'Did you mean "fsdp"? HINT']),
    ("bad option value", ["run", "-s", "fsdp:shard=bogus", S], 2, ['shard="bogus"', "full, grad_op, none"]),
    ("unknown option", ["run", "-s", "fsdp:sharding=full", S], 2, ['no option "sharding"', "HINT"]),
    ("nproc 0", ["run", "-s", "ddp", "-n", "0", S], 2, ["--nproc 0 must be 1 or more"]),
    ("nproc negative", ["run", "-s", "ddp", "-n", "-2", S], 2, ["--nproc -2 must be 1 or more"]),
    ("nproc not a number", ["run", "-s", "ddp", "-n", "two", S], 2, ["--nproc", "'two' is not a valid int"]),
    ("timeout not a number", ["run", "--timeout", "soon", S], 2, ["--timeout", "'soon' is not a valid float"]),
    ("negative timeout", ["run", "--timeout", "-3", S], 2, ["--timeout -3.0 must be a positive"]),
    ("missing script", ["run", "-s", "ddp", "nosuch.py"], 2, ["nosuch.py does not exist"]),
    ("no script", ["run", "-s", "ddp"], 2, ["no script given", "HINT"]),
    ("nnodes without master", ["run", "--nnodes", "2", S], 2, ["--nnodes 2 needs --master HOST:PORT"]),
    ("master without port", ["run", "--nnodes", "2", "--master", "node0", S], 2, ['"node0" is not HOST:PORT']),
    ("node rank out of range", ["run", "--nnodes", "2", "--node-rank", "2", "--master", "h:1", S], 2,
     ["--node-rank 2 must be between 0 and 1"]),
    ("one-process method with nproc", ["run", "-s", "single", "-n", "2", S], 2, ["runs as one process", "ddp"]),
    ("method of the other framework", ["run", "-s", "mirrored", S], 2, ["mirrored is a TensorFlow method"]),
    ("checkpoint-every alone", ["run", "--checkpoint-every", "5", S], 2, ["--checkpoint-dir and --checkpoint-every"]),
    ("checkpoint-every zero", ["run", "--checkpoint-dir", "x", "--checkpoint-every", "0", S], 2,
     ["--checkpoint-every 0 must be 1 or more"]),
    ("stall timeout zero", ["run", "--stall-timeout", "0", S], 2, ["--stall-timeout 0.0 must be a positive"]),
    ("json without dry-run", ["run", "--json", S], 2, ["--json only applies to --dry-run"]),
    ("compare unknown method", ["compare", "--strategies", "ddp,fsdpp"], 2, ['unknown strategy "fsdpp"']),
    ("compare negative steps", ["compare", "--steps", "-1"], 2, ["--steps must be ≥ 1"]),
    ("compare bad nproc list", ["compare", "--nproc", "1,x"], 2, ['--nproc "1,x" is not a comma-separated list']),
    ("compare budget below zero", ["compare", "--memory-per-rank", "-1"], 2, ["--memory-per-rank -1 must be"]),
    ("compare budget nothing fits", ["compare", "-w", "gpt", "-s", "single,ddp", "-n", "2", "--memory-per-rank",
                                     "0.001"], 2, ["no requested method fits 0.001 GiB per rank", "single×1 needs"]),
    ("unknown command", ["trian"], 2, ["trian"]),
    ("advise no model", ["advise", "--gpus", "8", "--gpu-mem", "80"], 2, ["say which model", "HINT"]),
    ("advise zero params", ["advise", "--params", "0", "--gpus", "8", "--gpu-mem", "80"], 2,
     ["--params 0 must be a positive number"]),
    ("advise negative params", ["advise", "--params", "-1e9", "--gpus", "8", "--gpu-mem", "80"], 2,
     ["--params -1e+09 must be a positive number"]),
    ("advise absurd params", ["advise", "--params", "1e20", "--gpus", "8", "--gpu-mem", "80"], 2,
     ["more than 1e+13 parameters", "HINT"]),
    ("advise unknown preset", ["advise", "--model", "llama-7", "--gpus", "8", "--gpu-mem", "80"], 2,
     ['unknown model preset "llama-7"', 'Did you mean "llama-7b"?']),
    ("advise zero gpus", ["advise", "--params", "1e9", "--gpus", "0", "--gpu-mem", "80"], 2,
     ["--gpus 0 must be between 1 and 1024"]),
    ("advise absurd memory", ["advise", "--params", "1e9", "--gpus", "8", "--gpu-mem", "1e6"], 2,
     ["--gpu-mem 1e+06 must be a GPU's memory in GiB"]),
    ("advise bad link", ["advise", "--params", "1e9", "--gpus", "8", "--gpu-mem", "80", "--interconnect", "warp"],
     2, ['--interconnect "warp" is not a link name']),
    ("advise bad precision", ["advise", "--params", "1e9", "--gpus", "8", "--gpu-mem", "80", "--precision",
                              "bf16"], 2, ['--precision "bf16" is not one of', 'Did you mean "bf16-']),
    ("advise gpus without memory on CPU", ["advise", "--params", "1e9", "--gpus", "8"], 2,
     ["no GPU on this machine", "--gpu-mem"]),
    ("advise factory not importable", ["advise", "--model", "nosuch.mod:make", "--gpus", "2", "--gpu-mem", "8"], 2,
     ['--model "nosuch.mod:make": cannot import it']),
]


@pytest.mark.parametrize(("argv", "code", "needles"), [c[1:] for c in CLI_CASES], ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input(tmp_path, monkeypatch, capsys, argv, code, needles):
    """Through the command's own entry point (``main``, what the ``paratrain`` executable calls), in this process:
    each case is refused before anything starts, so a fresh interpreter per case (two seconds of imports) would
    test nothing more. The tests below that need one (config files, scripts, ports) start one."""
    if argv[:3] == ["run", "-s", "mirrored"]:  # reaches TensorFlow's launcher: not in the suite's own process
        proc = paratrain(*argv, cwd=tmp_path)
    else:
        monkeypatch.chdir(tmp_path)
        proc = SimpleNamespace(returncode=main(list(argv)), stderr=capsys.readouterr().err)
    line = one_line_error(proc, code, *needles)
    assert not line.endswith("?."), line
    assert not list(tmp_path.iterdir()), "a refused command wrote something"


def test_compare_does_not_draw_a_table_before_an_input_error(tmp_path):
    proc = paratrain("compare", "--strategies", "ddp,fsdpp", cwd=tmp_path)
    assert "┏" not in proc.stderr and "┃" not in proc.stderr and not list(tmp_path.iterdir())


def test_compare_output_dir_not_writable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("mine")
    one_line_error(paratrain("compare", "--out", str(blocker / "sub")), 2, "cannot write the results to", "HINT")
    assert blocker.read_text() == "mine"


def test_compare_refuses_a_folder_of_the_users_files(tmp_path):
    (tmp_path / "notes.txt").write_text("keep")
    one_line_error(paratrain("compare", "--out", str(tmp_path), "--steps", "20"), 2, "refusing to write into it")
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "keep"


def test_malformed_config_file(tmp_path):
    (tmp_path / "paratrain.toml").write_text("[run\nstrategy = ddp")
    one_line_error(paratrain("run", S, cwd=tmp_path), 2, "paratrain.toml is not valid TOML")


def test_unknown_key_in_config_file(tmp_path):
    (tmp_path / "paratrain.toml").write_text('[run]\nstrategi = "ddp"\n')
    one_line_error(paratrain("run", S, cwd=tmp_path), 2, 'unknown key "strategi"', 'Did you mean "strategy"?')


def test_config_value_of_the_wrong_type_names_the_key_and_the_type(tmp_path):
    (tmp_path / "paratrain.toml").write_text('[run]\nnproc = "two"\n')
    line = one_line_error(paratrain("run", S, cwd=tmp_path), 2, 'paratrain.toml: nproc = "two" must be an integer')
    assert "not supported between" not in line


@pytest.mark.parametrize("command", [["run", "-s", "ddp"], ["compare", "--script"]], ids=["run", "compare"])
def test_a_directory_given_as_the_script_is_called_a_directory(tmp_path, command):
    (tmp_path / "train_dir").mkdir()
    (tmp_path / "train_dir" / "train.py").write_text("print('hi')\n")
    line = one_line_error(paratrain(*command, "train_dir/", cwd=tmp_path), 2,
                          "script train_dir/ is a directory, not a script", "train_dir/train.py")
    assert "does not exist" not in line


def test_script_that_is_not_python_fails_before_any_process_starts(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\necho hi && torchrun train.py\n")
    proc = paratrain("run", "-s", "ddp", "-n", "2", str(script))
    one_line_error(proc, 2, "is not a valid Python script (line 2)")
    assert "rank" not in proc.stderr  # no worker ever started


def test_checkpoint_dir_that_is_a_file(tmp_path):
    file = tmp_path / "ckpt"
    file.write_text("not a checkpoint")
    one_line_error(paratrain("run", "--checkpoint-dir", str(file), "--checkpoint-every", "5", S), 2, "is a file")
    assert file.read_text() == "not a checkpoint"


def test_port_already_in_use_with_a_fixed_master_says_so(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = paratrain("run", "-s", "ddp", "-n", "2", "--master", f"127.0.0.1:{port}", str(SCRIPTS / "quiet.py"))
    one_line_error(proc, 1, f"port {port} of --master", "already in use", "does not pick another")


@pytest.mark.multiprocess
def test_unreachable_master_fails_within_the_rendezvous_timeout(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = paratrain("run", "-s", "ddp", "-n", "1", "--nnodes", "2", "--node-rank", "1", "--master",
                     f"127.0.0.1:{port}", "--rendezvous-timeout", "3", str(SCRIPTS / "quiet.py"), timeout=90)
    one_line_error(proc, 1, f"node 1 gave up waiting for node 0 at 127.0.0.1:{port}", "--rendezvous-timeout")
    assert "frame #" not in proc.stderr  # torch's C++ stack of the retries stays out of the launcher's output


@pytest.mark.multiprocess
def test_script_arguments_that_look_like_torchrun_options_are_the_scripts(tmp_path):
    proc = paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "print_args.py"), "--log", "x", "--local",
                     "--start", "1", "--master", "m")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['--log', 'x', '--local', '--start', '1', '--master', 'm']"


def test_session_with_a_method_under_plain_python_is_one_line():
    proc = python("-c", "import paratrain as pt; pt.Session('ddp')")
    one_line_error(proc, 1, "strategy ddp needs one process per rank", "paratrain run --strategy ddp")


@pytest.mark.multiprocess
def test_prepared_model_and_loader_left_unused_is_detected(tmp_path):
    proc = paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "own_model.py"))
    one_line_error(proc, 2, "model and loader returned by session.prepare() were not used")


@pytest.fixture(scope="module")
def saved_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved") / "ckpt"
    proc = python(CKPT, "save", str(folder))
    assert proc.returncode == 0, proc.stderr
    return folder


@pytest.fixture
def good_checkpoint(saved_checkpoint, tmp_path):
    """A fresh copy of one saved checkpoint for each test to damage."""
    return shutil.copytree(saved_checkpoint, tmp_path / "ckpt")


def _snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_checkpoint_from_a_different_model(good_checkpoint):
    one_line_error(python(CKPT, "other-model", str(good_checkpoint)), 1, "does not fit this model", "shape differs")


def test_corrupted_checkpoint_shard(good_checkpoint):
    shard = next(good_checkpoint.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    one_line_error(python(CKPT, "load", str(good_checkpoint)), 1, "is damaged", "load an earlier checkpoint")


@pytest.mark.parametrize("target", [".metadata", "trainer_state.pt"])
def test_checkpoint_whose_pickle_would_run_code_is_refused(good_checkpoint, tmp_path, target):
    marker = tmp_path / "pwned"
    payload = (f"import os, pickle, torch\n"
               f"class E:\n    def __reduce__(self): return (os.system, ('touch {marker}',))\n"
               f"path = {str(good_checkpoint / target)!r}\n"
               f"torch.save({{'x': E()}}, path) if path.endswith('.pt') else pickle.dump(E(), open(path, 'wb'))\n")
    assert python("-c", payload).returncode == 0
    one_line_error(python(CKPT, "load", str(good_checkpoint)), 1, "refusing to load", "could run code")
    assert not marker.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="file-size limits (RLIMIT_FSIZE) are how a full disk is simulated")
def test_disk_full_during_save_keeps_the_previous_checkpoint(good_checkpoint):
    before = _snapshot(good_checkpoint)
    one_line_error(python(CKPT, "disk-full", str(good_checkpoint)), 1, "could not write checkpoint",
                   "previous checkpoint there is intact")
    assert _snapshot(good_checkpoint) == before
    assert not list(good_checkpoint.parent.glob(".ckpt.*"))  # no half-written sibling left behind
    assert python(CKPT, "load", str(good_checkpoint)).returncode == 0
