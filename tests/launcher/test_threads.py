"""Threads per worker: read back from the worker processes themselves, never from the launcher's variables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from paratrain.launcher.threads import cgroup_cpu_limit, choose_threads
from tests.helpers.launch import ROOT, check, paratrain, worker_env

SCRIPT = ROOT / "tests" / "helpers" / "scripts" / "report_threads.py"
CORES = len(os.sched_getaffinity(0))


def _env_without_omp(**extra: str) -> dict[str, str]:
    env = worker_env(**extra)
    if "OMP_NUM_THREADS" not in extra:
        env.pop("OMP_NUM_THREADS")
    return env


def _seen(folder) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))]


@pytest.mark.multiprocess
@pytest.mark.parametrize(("strategy", "nproc"), [("single", 1), ("ddp", 2)])
def test_default_is_the_cores_divided_by_the_processes(tmp_path, strategy, nproc):
    check(paratrain("run", "-s", strategy, "-n", str(nproc), str(SCRIPT), str(tmp_path), env=_env_without_omp()))
    seen = _seen(tmp_path)
    assert len(seen) == nproc
    assert {s["torch_threads"] for s in seen} == {max(1, CORES // nproc)}
    # torch's import ran with the collector paused and was frozen; the collector runs again for the script
    assert all(s["gc_enabled"] and s["frozen"] > 100_000 for s in seen), seen
    # single's script runs in a fork of the launcher (torch imported); torchrun's ranks are fresh interpreters that
    # import torch when the script does, as under native torchrun
    assert all(s["torch_preloaded"] == (strategy == "single") for s in seen), seen


@pytest.mark.multiprocess
@pytest.mark.parametrize(("strategy", "nproc"), [("single", 1), ("ddp", 2)])
def test_the_users_omp_num_threads_wins_unchanged(tmp_path, strategy, nproc):
    """Passed on as it is, and torch makes of it what it makes under plain python (MKL caps it at the cores)."""
    native = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], text=True,
                            capture_output=True, env=_env_without_omp(OMP_NUM_THREADS="3"), check=True)
    check(paratrain("run", "-s", strategy, "-n", str(nproc), str(SCRIPT), str(tmp_path),
                    env=_env_without_omp(OMP_NUM_THREADS="3")))
    assert {(s["torch_threads"], s["omp"]) for s in _seen(tmp_path)} == {(int(native.stdout), "3")}


@pytest.mark.multiprocess
def test_threads_flag_beats_the_environment(tmp_path):
    check(paratrain("run", "-s", "ddp", "-n", "2", "--threads", "2", str(SCRIPT), str(tmp_path),
                    env=_env_without_omp(OMP_NUM_THREADS="1")))
    assert {s["torch_threads"] for s in _seen(tmp_path)} == {2}


@pytest.mark.multiprocess
def test_cpu_affinity_is_respected_not_just_cpu_count(tmp_path):
    """A job confined to one core (taskset, a batch scheduler) gets one thread, whatever os.cpu_count() says."""
    cmd = [sys.executable, "-m", "paratrain.cli.main", "run", "-s", "single", str(SCRIPT), str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env_without_omp(),
                          preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    check(proc)
    assert [s["torch_threads"] for s in _seen(tmp_path)] == [1]
    assert "oversubscribed" not in proc.stderr


@pytest.mark.multiprocess
def test_more_threads_than_cores_is_run_but_said(tmp_path):
    """--threads beyond the cores is the user's call: honoured, with one line saying the threads will take turns."""
    cmd = [sys.executable, "-m", "paratrain.cli.main", "run", "-s", "single", "--threads", "2", str(SCRIPT),
           str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env_without_omp(),
                          preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    check(proc)
    assert [s["torch_threads"] for s in _seen(tmp_path)] == [2]
    notes = [ln for ln in proc.stderr.splitlines() if "oversubscribed" in ln]
    assert notes == ["paratrain: 1 process(es) × 2 thread(s) (--threads) on 1 core(s): oversubscribed — they take "
                     "turns on the cores, and step times will show it"], proc.stderr


@pytest.mark.multiprocess
def test_one_process_methods_run_the_script_in_a_fork_of_the_launcher(tmp_path):
    """No second interpreter (and no second torch import) for single: the script runs in a fork of the launcher."""
    proc = subprocess.Popen([sys.executable, "-m", "paratrain.cli.main", "run", "-s", "single", str(SCRIPT),
                             str(tmp_path)], cwd=ROOT, env=worker_env())
    assert proc.wait(timeout=120) == 0
    (seen,) = _seen(tmp_path)
    assert seen["ppid"] == proc.pid and seen["pid"] != proc.pid
    assert "paratrain.cli.main" in seen["cmdline"], seen["cmdline"]  # not a fresh `python -m ...worker`
    assert seen["gc_enabled"], "the launcher paused the garbage collector to import torch and left it off"


def test_dry_run_says_how_many_threads_and_why(tmp_path):
    proc = check(paratrain("run", "-s", "ddp", "-n", "2", "--dry-run", "--json", str(SCRIPT), str(tmp_path),
                           env=_env_without_omp()))
    plan = json.loads(proc.stdout)
    assert plan["threads_per_process"] == max(1, CORES // 2) and plan["env"]["OMP_NUM_THREADS"] == str(
        max(1, CORES // 2))
    assert "cores" in plan["threads_reason"]
    (tmp_path / "paratrain.toml").write_text("threads = 5\n")
    proc = check(paratrain("run", "-s", "single", "--dry-run", "--json", str(SCRIPT), str(tmp_path), cwd=tmp_path,
                           env=_env_without_omp(OMP_NUM_THREADS="2")))
    assert json.loads(proc.stdout)["threads_per_process"] == 5


def test_bad_threads_value_is_one_line():
    proc = paratrain("run", "-s", "single", "--threads", "0", str(SCRIPT), "x")
    assert proc.returncode == 2 and "--threads 0 must be 1 or more" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_machines_keep_torchruns_one_thread_per_process():
    assert choose_threads(4, gpus=4, environ={}).threads == 1
    assert choose_threads(4, gpus=4, requested=6, environ={}).threads == 6
    assert choose_threads(1, gpus=1, environ={}).threads >= 1


@pytest.mark.parametrize(("files", "expected"), [
    ({"cpu.max": "150000 100000\n"}, 2),
    ({"cpu.max": "max 100000\n"}, None),
    ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3),
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
    ({}, None),
])
def test_cgroup_cpu_quota_is_read_in_both_layouts(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_limit(tmp_path) == expected
