"""GPU×GPU link matrix, the same picture as ``nvidia-smi topo -m``.

Why it matters: how GPUs are wired decides which parallel method pays off. GPUs joined by NVLink make
all-reduce (DDP) and sharding (FSDP) cheap; GPUs that only meet across the CPU interconnect (SYS) make every
collective slow. The function here is pure over an already-initialised NVML module and its device handles, so
``paratrain gpus --topology`` and the method advisor can share it and tests can feed it a fake module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# NVML's common-ancestor levels (nvmlGpuTopologyLevel_t) → the labels nvidia-smi prints. INTERNAL means two
# GPUs on one board (e.g. a K80); nvidia-smi shows such a pair as PIX, so we do too.
_LEVEL_LABELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

SELF = "X"
UNKNOWN = "n/a"

LEGEND: tuple[tuple[str, str], ...] = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g. QPI/UPI)"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe host bridges within a NUMA "
             "node"),
    ("PHB", "Connection traversing PCIe as well as a PCIe host bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe bridges (without traversing the PCIe host bridge)"),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks (NV alone: NVLink peer access, count unknown)"),
    ("n/a", "NVML could not tell"),
)


@dataclass
class Topology:
    """``matrix[i][j]`` is the link label between ``gpus[i]`` and ``gpus[j]`` (physical NVML indices)."""

    gpus: list[int]
    matrix: list[list[str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "matrix": [list(row) for row in self.matrix]}

    def label(self, a: int, b: int) -> str:
        """The label between physical GPUs ``a`` and ``b``."""
        return self.matrix[self.gpus.index(a)][self.gpus.index(b)]


def level_label(level: int) -> str:
    """Map an NVML topology level to nvidia-smi's label; unknown levels (newer drivers) read as n/a."""
    return _LEVEL_LABELS.get(level, UNKNOWN)


def _bus_id(pci: Any) -> str | None:
    bus = getattr(pci, "busId", None)
    if isinstance(bus, bytes):  # older nvidia-ml-py releases returned bytes
        bus = bus.decode(errors="replace")
    return bus.upper() if bus else None


def _active_link_peers(nvml: Any, handle: Any) -> list[str]:
    """PCIe bus ids at the far end of each active NVLink of one GPU.

    Links that a GPU does not have raise (InvalidArgument / NotSupported); we skip them instead of stopping,
    because link numbers are not guaranteed to be contiguous.
    """
    peers: list[str] = []
    max_links = getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    for link in range(max_links):
        try:
            if nvml.nvmlDeviceGetNvLinkState(handle, link) != enabled:
                continue
            bus = _bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        except nvml.NVMLError:
            continue
        if bus:
            peers.append(bus)
    return peers


def _nvlink_peer(nvml: Any, h1: Any, h2: Any) -> bool:
    try:
        status = nvml.nvmlDeviceGetP2PStatus(h1, h2, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
    except nvml.NVMLError:
        return False
    return bool(status == nvml.NVML_P2P_STATUS_OK)


def link_matrix(nvml: Any, handles: Sequence[Any], indices: Sequence[int] | None = None) -> Topology:
    """Build the link matrix for ``handles`` (NVML must already be initialised by the caller).

    A pair with NVLink peer access reads ``NV<n>`` when the number of direct links can be counted (each
    active link whose remote PCI bus id is the other GPU), else plain ``NV`` (e.g. behind an NVSwitch the
    links end at the switch). Other pairs get the PCIe/CPU label from their common ancestor. Any NVML error on
    a pair gives ``n/a`` for that pair only.
    """
    gpus = list(indices) if indices is not None else list(range(len(handles)))
    bus_ids: list[str | None] = []
    peers: list[list[str]] = []
    for handle in handles:
        try:
            bus_ids.append(_bus_id(nvml.nvmlDeviceGetPciInfo(handle)))
        except nvml.NVMLError:
            bus_ids.append(None)
        peers.append(_active_link_peers(nvml, handle))

    matrix: list[list[str]] = []
    for i, h1 in enumerate(handles):
        row: list[str] = []
        for j, h2 in enumerate(handles):
            if i == j:
                row.append(SELF)
            elif _nvlink_peer(nvml, h1, h2):
                count = peers[i].count(bus_ids[j]) if bus_ids[j] else 0
                row.append(f"NV{count}" if count else "NV")
            else:
                try:
                    row.append(level_label(nvml.nvmlDeviceGetTopologyCommonAncestor(h1, h2)))
                except nvml.NVMLError:
                    row.append(UNKNOWN)
        matrix.append(row)
    return Topology(gpus=gpus, matrix=matrix)
