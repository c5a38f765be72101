"""What can run here: every method's availability and the versions of the backends behind them.

Each check is isolated: each method probes its own optional backend (DeepSpeed, Horovod, TensorFlow) in a
subprocess with a time limit (``MethodSpec.doctor_component``), so one that hangs or crashes on import shows as an
error line instead of breaking the report, and a new method brings its own line.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass, field

from paratrain.probes import Component
from paratrain.strategies import registry

CHECK_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class MethodStatus:
    name: str
    framework: str
    launcher: str
    status: str  # "available" | "not available" | "not implemented" | "check failed"
    reason: str
    fix: str


@dataclass
class Report:
    methods: list[MethodStatus] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"methods": [asdict(m) for m in self.methods], "components": [asdict(c) for c in self.components]}


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
    """The line of each package a method needs beyond torch, asked of the method itself (its probe runs in its own
    interpreter with a time limit); a package shared by several methods (TensorFlow) is shown once."""
    # Methods that inherit one probe (mirrored and multiworker: TensorFlow's) ask it once; the probes, each waiting
    # on an interpreter of its own, run side by side.
    probes = list({entry.load().doctor_component.__func__: entry.load()
                   for entry in registry.entries() if entry.implemented}.values())
    with ThreadPoolExecutor(max_workers=4) as pool:
        found = list(pool.map(lambda method: method.doctor_component(timeout), probes))
    out: dict[str, Component] = {}
    for component in found:  # in the registry's order, whichever probe finished first
        if component is not None and component.name not in out:
            out[component.name] = component
    return list(out.values())


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
