"""``paratrain setup horovod``: Horovod 0.28.1 built for the installed torch (and TensorFlow), with a wheel cache.

Horovod's last release no longer builds as published against today's toolchains (CMake 4 refuses its bundled gloo,
torch ≥ 2.1 needs C++17). This module fetches the sdist with pip, applies paratrain's patch set
(``patches/horovod-0.28.1.patch``, explained hunk by hunk in ``patches/README.md``), builds a wheel with the Gloo
controller and CPU operations (NCCL operations too when torch has CUDA) — with the TensorFlow/Keras binding too
when TensorFlow is installed, since the seed shows Horovod as the method that serves both frameworks — keeps it in
a cache keyed by (horovod, torch, tensorflow, python, cuda) and installs it. The next install of the same
combination takes seconds; an installation that already matches is left alone.

Library code: progress goes to a callback and failures are :class:`~paratrain.errors.SetupError`; the CLI renders.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from paratrain.distenv import CACHE_DIR_VAR, HOROVOD_SDIST_VAR
from paratrain.errors import SetupError

VERSION = "0.28.1"
PATCH = f"horovod-{VERSION}.patch"
CMAKE_REQUIREMENT = "cmake>=3.13,<5"
# Horovod's own install_requires, installed from the registry (the wheel itself goes in with --no-deps so that pip
# never resolves torch again).
RUNTIME_REQUIREMENTS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi>=1.4.0")
_PERCENT = re.compile(r"^\s*\[\s*(\d+)%\]")

Progress = Callable[[str, float | None], None]  # (what is happening, percent of the compile or None)


@dataclass(frozen=True)
class SetupResult:
    action: str  # "present" (nothing to do), "cached" (installed the cached wheel), "built" (built, cached, installed)
    wheel: Path | None
    seconds: float
    key: str


def cache_root() -> Path:
    """``$PARATRAIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/paratrain``, else ``~/.cache/paratrain``."""
    if os.environ.get(CACHE_DIR_VAR):
        return Path(os.environ[CACHE_DIR_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paratrain"


# The distributions TensorFlow is published as; the first one installed is the one Horovod compiles against.
TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tensorflow-intel", "tf-nightly")


def tensorflow_version() -> str | None:
    """The installed TensorFlow's version (from its metadata: importing it takes seconds), or None."""
    for name in TENSORFLOW_DISTRIBUTIONS:
        with contextlib.suppress(metadata.PackageNotFoundError):
            return metadata.version(name).split("+")[0]
    return None


def build_key() -> str:
    """What a Horovod wheel is only valid for: its version, torch's (its C++ ABI), TensorFlow's when it has the
    TensorFlow binding, the Python tag and CUDA."""
    import torch

    cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
    torch_version = torch.__version__.split("+")[0]
    tf = f"_tf-{tensorflow_version()}" if tensorflow_version() else ""
    return f"horovod-{VERSION}_torch-{torch_version}{tf}_{sys.implementation.cache_tag}_{cuda}"


def built_for() -> dict[str, str] | None:
    """What the installed Horovod was built against (``{"pytorch": "2.13.0", "tensorflow": "2.21.0"}``, a framework
    absent when its binding was not built; ``{"horovod": "0.27.0"}`` for another release), or None without Horovod."""
    try:
        version = metadata.version("horovod")
    except metadata.PackageNotFoundError:
        return None
    if version != VERSION:
        return {"horovod": version}
    try:
        built = json.loads(resources.files("horovod").joinpath("metadata.json").read_text())
    except (FileNotFoundError, ModuleNotFoundError, ValueError, OSError):
        return {}
    found = {"pytorch": built.get("pytorch") or built.get("torch"), "tensorflow": built.get("tensorflow")}
    return {k: str(v) for k, v in found.items() if v and v != "none"}


def installed_for() -> str | None:
    """The torch version the installed Horovod was built against ("none" without the torch binding), or None."""
    built = built_for()
    if built is None:
        return None
    if "horovod" in built:
        return f"horovod {built['horovod']}"
    return built.get("pytorch", "none" if built else "unknown")


def torch_matches(built: str | None) -> bool:
    import torch

    return built is not None and built.split("+")[0] == torch.__version__.split("+")[0]


def matches_installed() -> bool:
    """The installed Horovod has the torch binding for this torch and, where TensorFlow is installed, the
    TensorFlow binding for this TensorFlow."""
    built = built_for() or {}
    if not torch_matches(built.get("pytorch")):
        return False
    tf = tensorflow_version()
    return tf is None or built.get("tensorflow", "").split("+")[0] == tf


def setup(progress: Progress | None = None, *, force: bool = False, rebuild: bool = False) -> SetupResult:
    """Make ``import horovod.torch`` work for the installed torch (and ``import horovod.tensorflow.keras`` for the
    installed TensorFlow); see the module docstring.

    ``force`` reinstalls even when a matching Horovod is present; ``rebuild`` ignores the cached wheel.
    """
    say = progress or (lambda _text, _pct: None)
    started = time.monotonic()
    key = build_key()
    if not force and not rebuild and matches_installed():
        return SetupResult("present", None, time.monotonic() - started, key)
    folder = cache_root() / "wheels" / key
    cached = sorted(folder.glob("horovod-*.whl")) if folder.is_dir() else []
    action = "cached"
    if rebuild or not cached:
        log = cache_root() / "logs" / f"{key}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        wheel = _build(folder, log, say)
        action = "built"
    else:
        wheel = cached[-1]
        say(f"installing the cached wheel {wheel.name}", None)
    _pip_install(wheel, say)
    return SetupResult(action, wheel, time.monotonic() - started, key)


def _run(step: str, cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
         on_line: Callable[[str], None] | None = None) -> None:
    """Run one step with its output appended to ``log``; a failure is one line naming the step and the log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                    cwd=cwd, stdin=subprocess.DEVNULL)
        except OSError as exc:
            raise SetupError(f"horovod setup failed at {step}: {exc.strerror}; log: {log}") from None
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            if on_line is not None:
                on_line(line)
        code = proc.wait()
    if code != 0:
        raise SetupError(f"horovod setup failed at {step} (exit code {code}); full log: {log}",
                         hint="read the end of the log; `paratrain setup horovod --rebuild` tries again")


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def _fetch_sdist(work: Path, log: Path, say: Progress) -> Path:
    if os.environ.get(HOROVOD_SDIST_VAR):
        return Path(os.environ[HOROVOD_SDIST_VAR])
    say(f"fetching the horovod {VERSION} source", None)
    _run("fetching the source", _pip("download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                                     f"horovod=={VERSION}", "-d", str(work)), log)
    found = sorted(work.glob(f"horovod-{VERSION}.tar.gz"))
    if not found:
        raise SetupError(f"horovod setup failed at fetching the source: pip left no sdist in {work}; log: {log}")
    return found[0]


def _unpack(sdist: Path, work: Path, log: Path) -> Path:
    try:
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
    except (OSError, tarfile.TarError) as exc:
        first = str(exc).strip().splitlines()[0].rstrip(":") if str(exc).strip() else type(exc).__name__
        raise SetupError(f"horovod setup failed at unpacking {sdist}: {first}; log: {log}") from None
    tree = work / f"horovod-{VERSION}"
    if not (tree / "setup.py").is_file():
        raise SetupError(f"horovod setup failed at unpacking: {sdist} is not the horovod {VERSION} source")
    return tree


def _patch(tree: Path, log: Path) -> None:
    patch = resources.files("paratrain.install").joinpath("patches", PATCH)
    with resources.as_file(patch) as path:
        if shutil.which("patch"):
            cmd = ["patch", "-p1", "--forward", "-i", str(path)]
        elif shutil.which("git"):
            cmd = ["git", "apply", "-p1", str(path)]
        else:
            raise SetupError("horovod setup needs `patch` or `git` to apply its build fixes",
                             hint="install one of them (e.g. apt-get install patch)")
        _run("applying paratrain's patch set", cmd, log, cwd=tree)


def _build_env(cmake: str) -> dict[str, str]:
    import torch

    env = dict(os.environ)
    env.update({
        "HOROVOD_WITH_PYTORCH": "1", "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1",
        "HOROVOD_WITHOUT_MXNET": "1", "HOROVOD_CPU_OPERATIONS": "GLOO",
        "HOROVOD_CMAKE": cmake,
        # setup.py runs make -j8 unless MAKEFLAGS says otherwise: one job per core.
        "MAKEFLAGS": env.get("MAKEFLAGS") or f"-j{os.cpu_count() or 1}",
    })
    # Asked for explicitly, so a TensorFlow the build cannot use fails the build instead of leaving the binding out.
    env["HOROVOD_WITH_TENSORFLOW" if tensorflow_version() else "HOROVOD_WITHOUT_TENSORFLOW"] = "1"
    if torch.version.cuda and shutil.which("nvcc"):
        env.setdefault("HOROVOD_GPU_OPERATIONS", "NCCL")
    else:
        env["HOROVOD_WITHOUT_NVTX"] = "1"
    return env


def _build(folder: Path, log: Path, say: Progress) -> Path:
    """Fetch, patch, compile; the wheel lands in the cache ``folder`` (atomically) and its path is returned."""
    with tempfile.TemporaryDirectory(prefix="paratrain-horovod-") as tmp:
        work = Path(tmp)
        say("installing the build tools (cmake)", None)
        _run("installing cmake", _pip("install", "-q", CMAKE_REQUIREMENT, *RUNTIME_REQUIREMENTS), log)
        cmake = shutil.which("cmake", path=sysconfig.get_path("scripts")) or shutil.which("cmake")
        if cmake is None:
            raise SetupError(f"horovod setup failed at installing cmake: no cmake after pip install; log: {log}")
        tree = _unpack(_fetch_sdist(work, log, say), work, log)
        say("applying paratrain's patch set", None)
        _patch(tree, log)
        say("compiling horovod (minutes)", 0.0)

        def on_line(line: str) -> None:
            if match := _PERCENT.match(line):
                say("compiling horovod", float(match.group(1)))

        dist = work / "dist"
        _run("compiling", _pip("wheel", "--no-build-isolation", "--no-deps", "-v", "-w", str(dist), str(tree)),
             log, env=_build_env(cmake), on_line=on_line)
        wheels = sorted(dist.glob("horovod-*.whl"))
        if not wheels:
            raise SetupError(f"horovod setup failed at compiling: no wheel was produced; full log: {log}")
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{wheels[0].name}.partial"
        shutil.copyfile(wheels[0], partial)
        final = folder / wheels[0].name
        os.replace(partial, final)  # a cache entry is whole or absent
        return final


def _pip_install(wheel: Path, say: Progress) -> None:
    log = cache_root() / "logs" / f"install-{time.strftime('%Y%m%d-%H%M%S')}.log"
    say("installing horovod's runtime requirements", None)
    _run("installing the runtime requirements", _pip("install", "-q", *RUNTIME_REQUIREMENTS), log)
    say(f"installing {wheel.name}", None)
    _run("installing the wheel", _pip("install", "-q", "--no-deps", "--force-reinstall", str(wheel)), log)
    with contextlib.suppress(OSError):
        log.unlink()  # kept only when a step failed
