"""`paratrain run` end to end: real torchrun launches on CPU/gloo."""

import json
import time

import pytest

from tests.helpers.launch import ROOT, SESSION_TRAIN, check, paratrain, python

SCRIPTS = ROOT / "tests" / "helpers" / "scripts"
pytestmark = pytest.mark.multiprocess


def test_asked_for_n_processes_gets_n(tmp_path):
    check(paratrain("run", "-s", "ddp", "-n", "3", str(SCRIPTS / "record_order.py"), str(tmp_path), "24", "6", "1"))
    files = sorted(p.name for p in tmp_path.glob("rank*.json"))
    assert files == ["rank0.json", "rank1.json", "rank2.json"]
    assert {json.loads((tmp_path / f).read_text())["world"] for f in files} == {3}


def test_unshuffled_order_is_kept_and_each_rank_gets_its_contiguous_chunk(tmp_path):
    check(paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "record_order.py"), str(tmp_path), "20", "8", "1"))
    r0 = json.loads((tmp_path / "rank0.json").read_text())["batches"]
    r1 = json.loads((tmp_path / "rank1.json").read_text())["batches"]
    assert r0 == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17]]
    assert r1 == [[4, 5, 6, 7], [12, 13, 14, 15], [18, 19]]


def test_failing_rank_ends_the_job_with_its_traceback_and_exit_code():
    start = time.monotonic()
    proc = paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "fail_rank.py"), timeout=120)
    elapsed = time.monotonic() - start
    assert proc.returncode == 1
    assert "RuntimeError: boom on rank 1" in proc.stderr
    assert "rank 1 failed first (exit code 1)" in proc.stderr
    # rank 1's own traceback comes before the echo it causes on rank 0 (a closed connection)
    assert proc.stderr.index("boom on rank 1") < proc.stderr.index("rank 1 failed first")
    echo = proc.stderr.find("Connection closed by peer")
    assert echo == -1 or proc.stderr.index("boom on rank 1") < echo
    assert elapsed < 60, f"took {elapsed:.0f} s to notice the failure"


def test_timeout_turns_a_stuck_rank_into_an_error():
    start = time.monotonic()
    proc = paratrain("run", "-s", "ddp", "-n", "2", "--timeout", "5", str(SCRIPTS / "stall.py"), timeout=110)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "rank 1 (host" in last and "left the lock-step" in last, last
    assert "rank 0 is waiting in session.all_reduce" in last and "rank 0 gave up waiting after --timeout" in last
    assert time.monotonic() - start < 100


def test_quiet_by_default_only_user_output_and_one_summary_line():
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", str(SCRIPTS / "quiet.py")))
    assert proc.stdout.strip().splitlines() == ["hello from the main rank of 2"]
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "× 2 processes (CPU) finished in" in lines[0], proc.stderr


def test_script_arguments_are_forwarded_even_when_they_look_like_ours(tmp_path):
    proc = check(paratrain("run", "-s", "single", str(SESSION_TRAIN), "--steps", "3", "--out", str(tmp_path)))
    assert "final loss" in proc.stdout
    losses = json.loads((tmp_path / "losses.json").read_text())["losses"]
    assert len(losses) == 3


def test_a_paratrain_flag_after_the_script_stays_the_scripts_with_one_note(tmp_path):
    proc = check(paratrain("run", "-s", "single", str(SCRIPTS / "print_args.py"), "--dry-run", "--lr", "3"))
    assert proc.stdout.strip() == "['--dry-run', '--lr', '3']"  # it ran, and the script got every argument
    notes = [ln for ln in proc.stderr.splitlines() if "--dry-run after print_args.py goes to print_args.py" in ln]
    assert len(notes) == 1 and "put it before print_args.py" in notes[0], proc.stderr
    own = tmp_path / "own_flags.py"
    own.write_text("import argparse\n\np = argparse.ArgumentParser()\np.add_argument('--dry-run', "
                   "action='store_true')\nprint(p.parse_args().dry_run)\n")
    proc = check(paratrain("run", "-s", "single", str(own), "--dry-run"))
    assert proc.stdout.strip() == "True" and "goes to" not in proc.stderr  # the script's own flag: no note


def test_dry_run_shows_resolved_config_and_torchrun_command():
    proc = check(paratrain("run", "-s", "fsdp:shard=grad_op", "-n", "2", "--timeout", "30", "--dry-run", "--json",
                           str(SESSION_TRAIN), "--steps", "5"))
    plan = json.loads(proc.stdout)
    assert plan["strategy"] == "fsdp:shard=grad_op"
    assert plan["world_size"] == 2
    assert "torch.distributed.run" in plan["command"] and "--nproc-per-node=2" in plan["command"]
    assert plan["env"]["PARATRAIN_STRATEGY"] == "fsdp"
    assert json.loads(plan["env"]["PARATRAIN_METHOD_OPTIONS"])["shard"] == "grad_op"
    assert plan["env"]["PARATRAIN_TIMEOUT"] == "30"
    assert plan["config"]["args"] == ["--steps", "5"]


def test_config_file_is_read_and_flags_win(tmp_path):
    cfg = tmp_path / "paratrain.toml"
    cfg.write_text('[run]\nstrategy = "fsdp"\nnproc = 3\ntimeout = 12\n')
    proc = check(paratrain("run", "--dry-run", "--json", "-n", "2", str(SESSION_TRAIN), cwd=tmp_path))
    plan = json.loads(proc.stdout)
    assert plan["strategy"] == "fsdp" and plan["nproc_per_node"] == 2
    assert plan["env"]["PARATRAIN_TIMEOUT"] == "12"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-s", "ddq", str(SESSION_TRAIN)], 'unknown strategy "ddq"'),
        (["-s", "fsdp:shard=ful", str(SESSION_TRAIN)], 'Did you mean "full"?'),
        (["-s", "fsdp:sahrd=full", str(SESSION_TRAIN)], 'fsdp has no option "sahrd"'),
        (["-s", "single", "-n", "2", str(SESSION_TRAIN)], "runs as one process"),
        (["-s", "ddp", "--nnodes", "2", str(SESSION_TRAIN)], "needs --master HOST:PORT"),
        (["-s", "ddp", "--master", "nohost", str(SESSION_TRAIN)], "is not HOST:PORT"),
        (["-s", "ddp", "-n", "0", str(SESSION_TRAIN)], "must be 1 or more"),
        (["-s", "mirrored", "-n", "2", "--nnodes", "2", "--master", "h:1", str(SESSION_TRAIN)],
         "mirrored runs in one process"),
        (["-s", "horovod", "--nnodes", "2", "--master", "h:1", str(SESSION_TRAIN)], "runs on one machine"),
        (["-s", "ddp", "missing.py"], "does not exist"),
        (["-s", "ddp", "--bogus", str(SESSION_TRAIN)], "no such option: --bogus"),
        (["--config", "nope.toml", str(SESSION_TRAIN)], "does not exist"),
        (["--json", str(SESSION_TRAIN)], "--json only applies to --dry-run"),
    ],
)
def test_bad_input_is_one_line_with_exit_code_2(args, message):
    proc = paratrain("run", *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_two_nodes_on_one_machine_rendezvous_through_master(tmp_path):
    """--nnodes/--node-rank/--master: two launchers (as two machines would run) form one 2-rank job."""
    import socket
    import subprocess
    import sys

    from tests.helpers.launch import worker_env

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    nodes = [
        subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "run", "-s", "ddp", "-n", "1", "--nnodes", "2",
                          "--node-rank", str(rank), "--master", f"127.0.0.1:{port}",
                          str(SCRIPTS / "record_order.py"), str(tmp_path), "16", "8", "1"],
                         cwd=ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=120) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0["world"] == r1["world"] == 2
    assert r0["batches"] == [[0, 1, 2, 3], [8, 9, 10, 11]] and r1["batches"] == [[4, 5, 6, 7], [12, 13, 14, 15]]


def test_session_script_under_plain_torchrun_uses_ddp_not_independent_copies(tmp_path):
    from tests.helpers.launch import python

    check(python("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                 str(SCRIPTS / "record_order.py"), str(tmp_path), "8", "4", "1"))
    r0 = json.loads((tmp_path / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "rank1.json").read_text())
    assert r0 == {"world": 2, "batches": [[0, 1], [4, 5]]} and r1["batches"] == [[2, 3], [6, 7]]


def test_user_error_in_a_single_process_script_is_one_line():
    proc = paratrain("run", "-s", "single", str(SCRIPTS / "bad_op.py"))
    assert proc.returncode == 2
    assert 'paratrain: error: all_reduce op "avg" is not one of' in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("strategy", "nproc"), [("ddp", "2"), ("single", "1")])
def test_exit_code_is_the_failing_ranks(strategy, nproc):
    proc = paratrain("run", "-s", strategy, "-n", nproc, str(SCRIPTS / "exit3.py"))
    assert proc.returncode == 3, proc.stderr
    assert "exit code 3" in proc.stderr


def test_a_second_job_in_the_same_process_gives_its_ranks_its_own_environment(tmp_path):
    """A notebook that changes a variable between two runs sees the change in the second job's ranks."""
    script = tmp_path / "env_mark.py"
    script.write_text("import os, sys\nimport paratrain as pt\ns = pt.Session()\n"
                      "open(os.path.join(sys.argv[1], f'{os.environ[\"MARK\"]}.{s.rank}'), 'w').close()\n")
    code = ("import os, sys\nfrom paratrain.cli.main import main\n"
            "for mark in ('first', 'second'):\n"
            "    os.environ['MARK'] = mark\n"
            f"    assert main(['run', '-s', 'ddp', '-n', '2', {str(script)!r}, {str(tmp_path)!r}]) == 0\n")
    check(python("-c", code, timeout=240))
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".py") == ["first.0", "first.1",
                                                                              "second.0", "second.1"]


def test_a_rank_reads_the_jobs_standard_input_as_under_torchrun(tmp_path):
    """A rank reads the job's standard input, as under torchrun: input() and a rank's pdb work."""
    script = tmp_path / "read_stdin.py"
    script.write_text("import sys\nimport paratrain as pt\ns = pt.Session()\n"
                      "if s.rank == 0:\n    print('rank 0 read', sys.stdin.readline().strip(), flush=True)\n"
                      "s.barrier()\n")
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", str(script), input="typed at the terminal\n"))
    assert "rank 0 read typed at the terminal" in proc.stdout
