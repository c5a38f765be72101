"""A small stand-in for the ``pynvml`` module (nvidia-ml-py), for tests on machines without an NVIDIA GPU.

This is the one fake the device tests use: there is no GPU in CI, and NVML is a C library we cannot run. It
mirrors the real module's names, signatures, constants and return shapes (checked against nvidia-ml-py 13.x):
strings come back as ``str``, memory in bytes, power in milliwatts, the CUDA driver version as an int
(12040 = 12.4), processes as objects with ``.pid`` / ``.usedGpuMemory`` (bytes or None), and errors as
``NVMLError`` subclasses built from an error code, exactly like ``pynvml.NVMLError(3)`` is an
``NVMLError_NotSupported``. Calls before ``nvmlInit`` raise ``NVMLError_Uninitialized`` as the real one does.
CUDA_VISIBLE_DEVICES is deliberately not modelled: NVML ignores it, and our code must handle it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 36
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50
NVML_P2P_CAPS_INDEX_READ = 0
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_NOT_SUPPORTED = 5

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like the real one: ``NVMLError(code)`` returns the subclass for that code; ``.value`` is the code."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - the real module's name and shape
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


def _error_class(name: str, code: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, code)

    klass = type(name, (NVMLError,), {"__new__": new})
    NVMLError._valClassMapping[code] = klass
    return klass


NVMLError_Uninitialized = _error_class("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _error_class("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _error_class("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _error_class("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", NVML_ERROR_DRIVER_NOT_LOADED)
NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", NVML_ERROR_LIBRARY_NOT_FOUND)
NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _error_class("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _error_class("NVMLError_Unknown", NVML_ERROR_UNKNOWN)

GIB = 1 << 30


@dataclass
class FakeGpu:
    """One GPU's answers. Defaults are an A100-SXM4-80GB as NVML reports it (bytes, mW, busId text)."""

    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 85899345920  # 81920 MiB
    memory_used: int = 4 * GIB
    utilization: int = 37
    temperature: int = 41
    power_usage_mw: int = 87654
    power_limit_mw: int = 400000
    bus_id: str = "00000000:07:00.0"
    compute_capability: tuple[int, int] = (8, 0)
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, usedGpuMemory bytes)
    nvlinks: int = 12  # links the chip has; which are active is decided by FakeNvml.nvlinks
    not_supported: set[str] = field(default_factory=set)  # NVML function names that raise NotSupported here


def make_gpus(count: int) -> list[FakeGpu]:
    """``count`` distinct A100s on consecutive PCIe buses, like a DGX node."""
    return [FakeGpu(uuid=f"GPU-{i:x}{i:x}a1b2c3-d4e5-6789-abcd-ef01234567{i:02x}",
                    bus_id=f"00000000:{0x07 + 0x08 * i:02X}:00.0", memory_used=(i + 1) * GIB,
                    utilization=10 * i, temperature=35 + i)
            for i in range(count)]


class FakeHandle:
    """Stands in for ``c_nvmlDevice_t``: opaque to callers."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<FakeHandle {self.index}>"


class FakeNvml:
    """An object that answers like the ``pynvml`` module; pass it wherever the code takes ``nvml``.

    - ``gpus``: a count or a list of :class:`FakeGpu`.
    - ``not_supported``: NVML function names that raise ``NVMLError_NotSupported`` on every GPU.
    - ``init_error``: an error code ``nvmlInit`` raises (e.g. ``NVML_ERROR_DRIVER_NOT_LOADED``).
    - ``topology``: ``topology[i][j]`` = NVML_TOPOLOGY_* level between GPU i and j (default: all HOSTBRIDGE).
    - ``nvlinks``: ``{(i, j): n}`` = n NVLinks joining GPU i and j directly.
    - ``switched``: indices of GPUs that reach each other through an NVSwitch (P2P over NVLink, but every link
      ends at the switch, so the number of links between two GPUs cannot be read).
    """

    NVMLError = NVMLError
    _CONSTANT_PREFIXES = ("NVML_", "NVMLError")

    def __init__(self, gpus: int | list[FakeGpu] = 2, *, not_supported: Iterable[str] = (),
                 init_error: int | None = None, topology: list[list[int]] | None = None,
                 nvlinks: dict[tuple[int, int], int] | None = None, switched: Iterable[int] = (),
                 driver: str = "550.54.15", cuda: int = 12040) -> None:
        self.gpus = make_gpus(gpus) if isinstance(gpus, int) else list(gpus)
        self.not_supported = set(not_supported)
        self.init_error = init_error
        n = len(self.gpus)
        self.topology = topology or [[NVML_TOPOLOGY_HOSTBRIDGE] * n for _ in range(n)]
        self.switched = set(switched)
        self.driver = driver
        self.cuda = cuda
        self.init_count = 0
        self.calls: list[str] = []
        self._links: list[list[str | None]] = [[None] * gpu.nvlinks for gpu in self.gpus]
        for (a, b), count in (nvlinks or {}).items():
            for peer_from, peer_to in ((a, b), (b, a)):
                free = [k for k, bus in enumerate(self._links[peer_from]) if bus is None][:count]
                for k in free:
                    self._links[peer_from][k] = self.gpus[peer_to].bus_id
        for i in self.switched:
            self._links[i] = ["00000000:C5:00.0"] * self.gpus[i].nvlinks  # every link ends at the NVSwitch

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes, looked up the way code reads them off the real module.
        if name.startswith(self._CONSTANT_PREFIXES) and name in globals():
            return globals()[name]
        raise AttributeError(name)

    # --- library -------------------------------------------------------------------------------------------
    def _enter(self, name: str, handle: FakeHandle | None = None) -> FakeGpu | None:
        self.calls.append(name)
        if self.init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        gpu = None if handle is None else self.gpus[handle.index]
        if name in self.not_supported or (gpu is not None and name in gpu.not_supported):
            raise NVMLError_NotSupported()
        return gpu

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    # --- per device ----------------------------------------------------------------------------------------
    def _gpu(self, name: str, handle: FakeHandle) -> FakeGpu:
        gpu = self._enter(name, handle)
        assert gpu is not None
        return gpu

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version: int | None = None) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=gpu.memory_total, free=gpu.memory_total - gpu.memory_used,
                               used=gpu.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=gpu.utilization // 2)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_usage_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=gpu.bus_id, busIdLegacy=gpu.bus_id, domain=0,
                               bus=int(gpu.bus_id.split(":")[1], 16), device=0, pciDeviceId=0x20B210DE)

    def nvmlDeviceGetCudaComputeCapability(self, handle: FakeHandle) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for pid, used in gpu.processes]

    # --- topology ------------------------------------------------------------------------------------------
    def nvmlDeviceGetTopologyCommonAncestor(self, device1: FakeHandle, device2: FakeHandle) -> int:
        self._gpu("nvmlDeviceGetTopologyCommonAncestor", device1)
        return self.topology[device1.index][device2.index]

    def nvmlDeviceGetP2PStatus(self, device1: FakeHandle, device2: FakeHandle, p2pIndex: int) -> int:
        self._gpu("nvmlDeviceGetP2PStatus", device1)
        if p2pIndex != NVML_P2P_CAPS_INDEX_NVLINK:
            return NVML_P2P_STATUS_OK
        peer = self.gpus[device2.index].bus_id
        joined = peer in self._links[device1.index] or {device1.index, device2.index} <= self.switched
        return NVML_P2P_STATUS_OK if joined else NVML_P2P_STATUS_NOT_SUPPORTED

    def _link(self, name: str, device: FakeHandle, link: int) -> str | None:
        gpu = self._gpu(name, device)
        if not 0 <= link < gpu.nvlinks:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._links[device.index][link]

    def nvmlDeviceGetNvLinkState(self, device: FakeHandle, link: int) -> int:
        active = self._link("nvmlDeviceGetNvLinkState", device, link) is not None
        return NVML_FEATURE_ENABLED if active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: FakeHandle, link: int) -> SimpleNamespace:
        bus = self._link("nvmlDeviceGetNvLinkRemotePciInfo", device, link)
        if bus is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(busId=bus, busIdLegacy=bus)
