"""What accelerators this machine has, asked of NVML first, then ``torch.cuda``, then nobody.

Why NVML first: it sees every GPU (not only the ones ``CUDA_VISIBLE_DEVICES`` leaves), knows utilisation,
power, processes and topology, and does not need torch to be imported. ``torch.cuda`` is the fallback for
machines where the NVML library is missing but CUDA works (some containers); it only knows names, memory and
compute capability. Every NVML call is guarded on its own: a field a GPU does not support becomes ``None``
instead of an error, so the inventory never fails half way. The NVML module is a parameter so tests can hand
in a fake.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from paratrain.devices.topology import Topology, link_matrix

_MIB = 1 << 20


@dataclass
class ProcessInfo:
    """A process holding memory on a GPU; user and name come from psutil and may be unknown."""

    pid: int
    user: str | None
    name: str | None
    memory_mib: int | None


@dataclass
class GpuInfo:
    """One physical GPU. ``index`` is the NVML index (torch source: the torch ordinal)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    driver: str | None = None
    cuda: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    memory_free_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    pci_bus_id: str | None = None
    compute_capability: str | None = None
    visible: bool = True
    processes: list[ProcessInfo] = field(default_factory=list)


@dataclass
class CpuInfo:
    """What a CPU-only (gloo) run has to work with."""

    cores: int
    logical_cores: int
    memory_gib: float


@dataclass
class Inventory:
    """The answer of :func:`collect`. ``to_json`` is the documented ``paratrain gpus --json`` schema."""

    source: str  # "nvml" | "torch" | "none"
    reason: str | None
    driver: str | None
    cuda: str | None
    gpus: list[GpuInfo]
    cpu: CpuInfo
    visible: list[int]
    topology: Topology | None = None
    nvml_reason: str | None = None  # why NVML alone failed, shown as "No NVIDIA GPU found (NVML: …)"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: exactly the keys documented for ``paratrain gpus --json``, in that order."""
        data = asdict(self)  # nested dataclasses (GpuInfo, ProcessInfo, CpuInfo, Topology) become dicts
        del data["nvml_reason"]
        return data


class SourceUnavailable(Exception):
    """A source (NVML or torch) could not answer; the message is the reason shown to the user.

    Not a ParatrainError: it never reaches the user as an error, only as the ``reason`` of an inventory.
    """


def nvml_module() -> Any | None:
    """The real ``pynvml`` module, or None if nvidia-ml-py is not installed. Tests monkeypatch this loader."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def cpu_info() -> CpuInfo:
    """Physical cores (logical if unknown), logical cores and RAM."""
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    cores = psutil.cpu_count(logical=False) or logical
    memory_gib = round(psutil.virtual_memory().total / 2**30, 1)
    return CpuInfo(cores=cores, logical_cores=logical, memory_gib=memory_gib)


def parse_visible_devices(value: str | None, uuids: Sequence[str | None]) -> list[int]:
    """The physical indices a CUDA program would see for ``CUDA_VISIBLE_DEVICES=value``, in CUDA's order.

    Mirrors CUDA (and torch's own parser): unset means all GPUs; entries are ordinals (parsed like
    ``strtoul``, so ``"1gpu"`` is 1) or, when the first entry starts with ``GPU-``, unique UUID prefixes.
    Parsing stops at the first invalid entry (negative, out of range, unknown or ambiguous UUID), so ``""``,
    ``"-1"`` and ``"NoDevFiles"`` mean no GPU; a repeated device makes the whole list empty. ``MIG-`` entries
    are not resolved to a parent GPU and also stop the list. Ordinals are taken as NVML (PCI bus) order, which
    is CUDA's order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and on machines with one GPU model.
    """
    count = len(uuids)
    if value is None:
        return list(range(count))
    uuid_mode = value.strip().startswith("GPU-")
    result: list[int] = []
    for raw in value.split(","):
        entry = raw.strip()
        index = _uuid_index(entry, uuids) if uuid_mode else _ordinal(entry)
        if index < 0 or index >= count:
            break
        if index in result:
            return []
        result.append(index)
    return result


def _ordinal(entry: str) -> int:
    digits = len(entry) - len(entry.lstrip("0123456789"))
    if entry[:1] == "+":
        return _ordinal(entry[1:])
    return int(entry[:digits]) if digits else -1


def _uuid_index(entry: str, uuids: Sequence[str | None]) -> int:
    if not entry.startswith("GPU-"):
        return -1
    matches = [i for i, uuid in enumerate(uuids) if uuid and uuid.lower().startswith(entry.lower())]
    return matches[0] if len(matches) == 1 else -1


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """One NVML query; None when this GPU or driver does not support it (or the binding lacks it)."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _cuda_text(version: int | None) -> str | None:
    return f"{version // 1000}.{version % 1000 // 10}" if version else None


def _process(pid: int, used: int | None) -> ProcessInfo:
    user = name = None
    try:
        proc = psutil.Process(pid)
        name = proc.name()
        user = proc.username()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass  # another container's pid, or a process that just ended: keep pid and memory
    return ProcessInfo(pid=pid, user=user, name=name, memory_mib=None if used is None else used // _MIB)


def _nvml_gpu(nvml: Any, index: int, handle: Any, driver: str | None, cuda: str | None) -> GpuInfo:
    gpu = GpuInfo(index=index, driver=driver, cuda=cuda)
    gpu.name = _text(_call(nvml, "nvmlDeviceGetName", handle))
    gpu.uuid = _text(_call(nvml, "nvmlDeviceGetUUID", handle))
    memory = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    if memory is not None:
        gpu.memory_total_mib = memory.total // _MIB
        gpu.memory_used_mib = memory.used // _MIB
        gpu.memory_free_mib = memory.free // _MIB
    rates = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    gpu.utilization_pct = None if rates is None else int(rates.gpu)
    sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    gpu.temperature_c = _call(nvml, "nvmlDeviceGetTemperature", handle, sensor)
    draw = _call(nvml, "nvmlDeviceGetPowerUsage", handle)
    gpu.power_draw_w = None if draw is None else round(draw / 1000, 1)
    limit = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    gpu.power_limit_w = None if limit is None else round(limit / 1000, 1)
    pci = _call(nvml, "nvmlDeviceGetPciInfo", handle)
    gpu.pci_bus_id = None if pci is None else _text(getattr(pci, "busId", None))
    capability = _call(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
    gpu.compute_capability = None if capability is None else f"{capability[0]}.{capability[1]}"
    seen: set[int] = set()
    for proc in _call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or []:
        if proc.pid not in seen:
            seen.add(proc.pid)
            gpu.processes.append(_process(int(proc.pid), getattr(proc, "usedGpuMemory", None)))
    return gpu


_NvmlAnswer = tuple[list[GpuInfo], str | None, str | None, Topology | None]  # gpus, driver, cuda, topology


def _from_nvml(nvml: Any | None, want_topology: bool) -> _NvmlAnswer:
    if nvml is None:
        raise SourceUnavailable("nvidia-ml-py (pynvml) is not installed")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise SourceUnavailable(str(exc)) from exc
    try:
        driver = _text(_call(nvml, "nvmlSystemGetDriverVersion"))
        cuda = _cuda_text(_call(nvml, "nvmlSystemGetCudaDriverVersion"))
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            raise SourceUnavailable(str(exc)) from exc
        if count == 0:
            raise SourceUnavailable("NVML reports 0 GPUs")
        gpus: list[GpuInfo] = []
        handles: list[Any] = []
        handle_indices: list[int] = []
        for index in range(count):
            handle = _call(nvml, "nvmlDeviceGetHandleByIndex", index)
            if handle is None:  # e.g. a lost GPU or no permission: still list it, with nothing known
                gpus.append(GpuInfo(index=index, driver=driver, cuda=cuda))
                continue
            handles.append(handle)
            handle_indices.append(index)
            gpus.append(_nvml_gpu(nvml, index, handle, driver, cuda))
        topology = link_matrix(nvml, handles, handle_indices) if want_topology else None
        return gpus, driver, cuda, topology
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def _torch_build() -> tuple[str | None, bool]:
    """(version, has GPU support) of the installed torch, read from torch/version.py without importing torch.

    Importing torch costs over a second; a CPU-only wheel cannot see a GPU anyway, so we skip the import then.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None, False
    try:
        text = (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return None, True  # unknown build: let the real import decide
    found = dict(re.findall(r"^(__version__|cuda|hip)\b[^=\n]*=\s*['\"]([^'\"]*)['\"]", text, re.M))
    return found.get("__version__", "(unknown version)"), bool(found.get("cuda") or found.get("hip"))


def probe_torch() -> tuple[list[GpuInfo], str | None]:
    """GPUs as ``torch.cuda`` sees them (already filtered by CUDA_VISIBLE_DEVICES), and torch's CUDA.

    Raises :class:`SourceUnavailable` when torch cannot see a GPU; a custom ``torch_probe`` does the same.
    """
    if "torch" not in sys.modules:
        version, gpu_build = _torch_build()
        if version is None and not gpu_build:
            raise SourceUnavailable("torch is not installed")
        if not gpu_build:
            raise SourceUnavailable(f"torch {version} is a CPU-only build")
    import torch

    if not torch.cuda.is_available():
        raise SourceUnavailable("torch.cuda.is_available() is False")
    cuda = torch.version.cuda or getattr(torch.version, "hip", None)
    gpus: list[GpuInfo] = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        uuid = _text(getattr(props, "uuid", None)) or None
        if uuid and not uuid.startswith("GPU-"):
            uuid = f"GPU-{uuid}"
        gpus.append(GpuInfo(index=index, name=props.name, uuid=uuid, cuda=cuda,
                            memory_total_mib=props.total_memory // _MIB,
                            compute_capability=f"{props.major}.{props.minor}"))
    return gpus, cuda


def collect(nvml: Any | None = None, *, topology: bool = False, env: Mapping[str, str] | None = None,
            torch_probe: Callable[[], tuple[list[GpuInfo], str | None]] = probe_torch) -> Inventory:
    """Ask NVML, then torch.cuda; the first one that finds GPUs answers. Never raises for a missing GPU.

    ``nvml`` defaults to the real ``pynvml`` (via :func:`nvml_module`); ``env`` defaults to ``os.environ`` and
    is only read for ``CUDA_VISIBLE_DEVICES``. ``topology`` adds the link matrix (NVML source only).
    """
    env = os.environ if env is None else env
    cpu = cpu_info()
    try:
        gpus, driver, cuda, topo = _from_nvml(nvml_module() if nvml is None else nvml, topology)
    except SourceUnavailable as exc:
        nvml_reason = str(exc)
    else:
        visible = parse_visible_devices(env.get("CUDA_VISIBLE_DEVICES"), [gpu.uuid for gpu in gpus])
        for gpu in gpus:
            gpu.visible = gpu.index in visible
        return Inventory("nvml", None, driver, cuda, gpus, cpu, visible, topo)
    try:
        gpus, cuda = torch_probe()
        if not gpus:
            raise SourceUnavailable("torch.cuda.device_count() is 0")
    except Exception as exc:  # a broken CUDA install must not break `paratrain gpus`: it becomes the reason
        text = str(exc) if isinstance(exc, SourceUnavailable) else f"{type(exc).__name__}: {exc}"
        reason = f"NVML: {nvml_reason}; torch: {text}"
        return Inventory("none", reason, None, None, [], cpu, [], None, nvml_reason)
    return Inventory("torch", f"NVML: {nvml_reason}", None, cuda, gpus, cpu, [gpu.index for gpu in gpus],
                     None, nvml_reason)
