"""Which accelerators this machine has and how they are wired.

The launcher and the method advisor need the same facts ``paratrain gpus`` shows (how many GPUs a job would
see, their memory, NVLink or PCIe between them), so they live here as plain data, apart from the CLI that
renders them.
"""

from __future__ import annotations

from paratrain.devices.inventory import (
    CpuInfo,
    GpuInfo,
    Inventory,
    ProcessInfo,
    collect,
    cpu_info,
    nvml_module,
    parse_visible_devices,
)
from paratrain.devices.topology import LEGEND, Topology, link_matrix

__all__ = [
    "LEGEND",
    "CpuInfo",
    "GpuInfo",
    "Inventory",
    "ProcessInfo",
    "Topology",
    "collect",
    "cpu_info",
    "link_matrix",
    "nvml_module",
    "parse_visible_devices",
]
