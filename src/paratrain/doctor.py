"""What can run here: every method's availability and the versions of the backends behind them.

Each check is isolated: optional backends (DeepSpeed, Horovod, TensorFlow) are probed in a subprocess with a time
limit, so one that hangs or crashes on import shows as "check failed" instead of breaking the report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field
from importlib import metadata

from paratrain.strategies import registry
from paratrain.strategies._tensorflow import tf_keras_fix

CHECK_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class MethodStatus:
    name: str
    framework: str
    launcher: str
    status: str  # "available" | "not available" | "not implemented" | "check failed"
    reason: str
    fix: str


@dataclass(frozen=True)
class Component:
    name: str
    version: str | None  # None when not installed / not built
    detail: str = ""
    fix: str = ""


@dataclass
class Report:
    methods: list[MethodStatus] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"methods": [asdict(m) for m in self.methods], "components": [asdict(c) for c in self.components]}


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _probe(code: str, timeout: float) -> dict:
    """Run a snippet that prints one JSON object, in its own interpreter, with a time limit."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"check timed out after {timeout:g} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [f"exited with code {proc.returncode}"])[-1]
        return {"error": last}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": "unreadable check output"}


# What `horovodrun --check-build` lists (frameworks, controllers, tensor operations), plus the torch (and TensorFlow)
# it was built for. Only the torch binding is imported: the TensorFlow one would cost the import of TensorFlow.
_HOROVOD_PROBE = """
import json, importlib.resources as r, horovod.torch as hvd
meta = json.loads(r.files("horovod").joinpath("metadata.json").read_text())
built, tf = meta.get("pytorch"), meta.get("tensorflow")
print(json.dumps({"tensorflow": tf if tf and tf != "none" else None,
                  "controllers": [n for n, f in (("MPI", hvd.mpi_built), ("Gloo", hvd.gloo_built)) if f()],
                  "ops": [n for n, f in (("NCCL", hvd.nccl_built), ("DDL", hvd.ddl_built), ("CCL", hvd.ccl_built),
                                         ("MPI", hvd.mpi_built), ("Gloo", hvd.gloo_built)) if f()],
                  "torch": built}))
"""

# TensorFlow's Keras (3, or tf_keras for multiworker fit) and the devices it sees; quiet: TF logs to stderr at import.
_TF_PROBE = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import importlib.metadata as m, tensorflow as tf
def v(d):
    try:
        return m.version(d)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"keras": v("keras"), "tf_keras": v("tf-keras"),
                  "devices": {k: len(tf.config.list_physical_devices(k)) for k in ("CPU", "GPU")}}))
"""

# DeepSpeed picks its accelerator at import (DS_ACCELERATOR, else what it detects); on CPU its communication op is
# compiled on first use unless it was built at install (or `make install-all` warmed the cache).
_DEEPSPEED_PROBE = """
import json, os, torch
os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
from deepspeed.accelerator import get_accelerator
from deepspeed.git_version_info import installed_ops
from torch.utils.cpp_extension import _get_build_directory
acc = get_accelerator()
shm = installed_ops.get("deepspeed_shm_comm") or os.path.exists(
    os.path.join(_get_build_directory("deepspeed_shm_comm", verbose=False), "deepspeed_shm_comm.so"))
print(json.dumps({"accelerator": acc.device_name(), "backend": acc.communication_backend_name(),
                  "prebuilt": sorted(k for k, v in installed_ops.items() if v), "shm": bool(shm)}))
"""


def _install_fix(method: str, extra: str) -> str:
    """The extra that installs a backend — only once paratrain can use it; until then nothing to run."""
    return f'pip install "paratrain[{extra}]"' if registry.info(method).implemented else ""


def torch_components() -> list[Component]:
    import torch
    import torch.distributed as dist

    out = [Component("torch", torch.__version__)]
    cuda = torch.version.cuda
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out.append(Component("CUDA", cuda, f"{gpus} GPU(s) visible" if cuda else "CPU-only torch build"))
    nccl = None
    if cuda and dist.is_available() and dist.is_nccl_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            nccl = None
    out.append(Component("NCCL", nccl, "" if nccl else "not available (needs a CUDA build of torch and a GPU)"))
    gloo = dist.is_available() and dist.is_gloo_available()
    out.append(Component("gloo", "built in" if gloo else None, "CPU collectives" if gloo else "not built"))
    mpi = dist.is_available() and dist.is_mpi_available()
    out.append(Component("MPI (torch)", "built in" if mpi else None, "" if mpi else "not built (optional)"))
    return out


def backend_components(timeout: float = CHECK_TIMEOUT_S) -> list[Component]:
    out = []
    ds = _dist_version("deepspeed")
    if ds:
        info = _probe(_DEEPSPEED_PROBE, timeout)
        detail = (f"error: {info['error']}" if "error" in info
                  else f"accelerator: {info['accelerator']} ({info['backend']}); ops built: "
                       f"{', '.join(info['prebuilt']) or 'none (compiled on first use)'}"
                       + ("" if info["accelerator"] != "cpu" else
                          f"; CPU comm op {'compiled' if info['shm'] else 'compiles on the first run (~1 min)'}"))
        out.append(Component("DeepSpeed", ds, detail))
    else:
        out.append(Component("DeepSpeed", None, "not installed", _install_fix("deepspeed", "deepspeed")))
    hvd = _dist_version("horovod")
    if hvd:
        info = _probe(_HOROVOD_PROBE, timeout)
        if "error" in info:  # typically built for another torch: rebuilding for this one fixes it
            out.append(Component("Horovod", hvd, f"error: {info['error']}", "paratrain setup horovod --force"))
        else:
            frameworks = f"PyTorch (built for torch {info['torch']})"
            tf_built, tf_here = info.get("tensorflow"), _dist_version("tensorflow", "tensorflow-cpu")
            if tf_built:
                frameworks += f", TensorFlow/Keras (built for TensorFlow {tf_built})"
            fix = ""
            if tf_here and (tf_built or "").split("+")[0] != tf_here.split("+")[0]:  # Keras scripts would fail
                frameworks += f"; no Keras binding for the installed TensorFlow {tf_here}"
                fix = "paratrain setup horovod --force"
            out.append(Component("Horovod", hvd, f"frameworks: {frameworks}; "
                                                 f"controllers: {', '.join(info['controllers']) or 'none'}; "
                                                 f"tensor ops: {', '.join(info['ops']) or 'none'}", fix))
    else:  # `pip install horovod` fails on current torch and CMake: paratrain builds a patched wheel
        out.append(Component("Horovod", None, "not installed", "paratrain setup horovod"))
    tf = _dist_version("tensorflow", "tensorflow-cpu")
    if not tf:
        out.append(Component("TensorFlow", None, "not installed", _install_fix("mirrored", "tf")))
        return out
    info = _probe(_TF_PROBE, timeout)
    if "error" in info:
        fix = 'pip install --force-reinstall "paratrain[tf]"'
        out.append(Component("TensorFlow", tf, f"error: {info['error']}", fix))
        return out
    devices = ", ".join(f"{n} {k}" for k, n in info["devices"].items() if n)
    legacy = f"tf_keras {info['tf_keras']} (multiworker fit)" if info["tf_keras"] else "no tf_keras (multiworker fit)"
    out.append(Component("TensorFlow", tf, f"Keras {info['keras']}; {legacy}; devices: {devices}",
                         "" if info["tf_keras"] else tf_keras_fix()))
    return out


def method_statuses(timeout: float = CHECK_TIMEOUT_S) -> list[MethodStatus]:
    def check(entry: registry.MethodInfo) -> MethodStatus:
        base = {"name": str(entry.method), "framework": entry.frameworks, "launcher": str(entry.launcher)}
        if not entry.implemented:
            return MethodStatus(**base, status="not implemented", reason="planned; not in this version", fix="")
        avail = entry.load().available()
        return MethodStatus(**base, status="available" if avail.ok else "not available",
                            reason=avail.reason, fix=avail.fix)

    out = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [(entry, pool.submit(check, entry)) for entry in registry.entries()]
        for entry, fut in futures:
            try:
                out.append(fut.result(timeout=timeout))
            except FutureTimeout:
                out.append(MethodStatus(str(entry.method), entry.framework, str(entry.launcher), "check failed",
                                        f"check timed out after {timeout:g} s", ""))
            except Exception as exc:
                out.append(MethodStatus(str(entry.method), entry.framework, str(entry.launcher), "check failed",
                                        f"{type(exc).__name__}: {exc}", ""))
    return out


def run_checks(timeout: float = CHECK_TIMEOUT_S) -> Report:
    return Report(methods=method_statuses(timeout), components=torch_components() + backend_components(timeout))
