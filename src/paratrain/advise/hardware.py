"""The hardware being planned for: from the flags, or from this machine (``paratrain gpus``) for what they omit."""

from __future__ import annotations

from collections.abc import Callable

from paratrain.advise import comm
from paratrain.advise.recommend import Hardware
from paratrain.devices.inventory import Inventory
from paratrain.errors import ConfigError

MAX_GPUS_PER_NODE = 1024
MAX_NODES = 100_000
MAX_GPU_MEM_GIB = 4096


def _check(gpus: int | None, gpu_mem: float | None, nodes: int) -> None:
    if gpus is not None and not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise ConfigError(f"--gpus {gpus} must be between 1 and {MAX_GPUS_PER_NODE} (GPUs per node)")
    if gpu_mem is not None and not 0 < gpu_mem <= MAX_GPU_MEM_GIB:
        raise ConfigError(f"--gpu-mem {gpu_mem:g} must be a GPU's memory in GiB, between 0 and {MAX_GPU_MEM_GIB}",
                          hint="e.g. --gpu-mem 80 for an 80 GB A100/H100")
    if not 1 <= nodes <= MAX_NODES:
        raise ConfigError(f"--nodes {nodes} must be between 1 and {MAX_NODES}")


def _local_link(inv: Inventory, visible: list[int]) -> comm.Link:
    """NVLink when every pair of the visible GPUs has it, else PCIe."""
    topo = inv.topology
    if topo is None or len(visible) < 2:
        return comm.Link("pcie", comm.LINKS["pcie"])
    pairs = [topo.label(a, b) for a in visible for b in visible if a < b and a in topo.gpus and b in topo.gpus]
    nvlink = bool(pairs) and all(p.startswith("NV") for p in pairs)
    name = "nvlink" if nvlink else "pcie"
    return comm.Link(name, comm.LINKS[name])


def resolve(*, gpus: int | None, gpu_mem: float | None, nodes: int = 1, interconnect: str | None = None,
            probe: bool = False, host_mem: float | None = None,
            inventory: Callable[[], Inventory] | None = None) -> tuple[Hardware, bool]:
    """The hardware, and whether bf16 is the right default precision (every local GPU is Ampere or newer)."""
    _check(gpus, gpu_mem, nodes)
    if host_mem is not None and not 0 < host_mem <= 1_000_000:
        raise ConfigError(f"--host-mem {host_mem:g} must be a node's memory in GiB, e.g. 512")
    if probe and interconnect:
        raise ConfigError("--probe measures the link that --interconnect names: give one of them")
    need_local = gpus is None or gpu_mem is None or (interconnect is None and not probe and nodes == 1)
    inv = None
    if need_local:
        from paratrain.devices import inventory as inv_module

        inv = (inventory or (lambda: inv_module.collect(topology=True)))()
    local = [g for g in inv.gpus if g.visible] if inv else []
    if (gpus is None or gpu_mem is None) and not local:
        why = f" ({inv.reason})" if inv and inv.reason else ""
        raise ConfigError(f"no GPU on this machine{why}: say what you are planning for",
                          hint="e.g. --gpus 8 --gpu-mem 80 (GPUs per node, GiB each)")
    if gpus is not None and gpu_mem is None and gpus > len(local):
        raise ConfigError(f"--gpus {gpus}: this machine has {len(local)} visible GPU(s)",
                          hint="to plan for other hardware, give --gpu-mem too")
    count = gpus if gpus is not None else len(local)
    mem = gpu_mem if gpu_mem is not None else min((g.memory_total_mib or 0) for g in local) / 1024
    if mem <= 0:
        raise ConfigError("the GPUs here do not report their memory", hint="give --gpu-mem GiB")
    if interconnect:
        link = comm.parse_link(interconnect)
    elif probe:
        link = comm.probe(nproc=max(2, min(count, len(local) or 2)))
    elif nodes > 1:
        link = comm.Link("ethernet", comm.LINKS["ethernet"])
    else:
        link = _local_link(inv, [g.index for g in local]) if inv else comm.Link("pcie", comm.LINKS["pcie"])
    source = "this machine" if (gpus is None or gpu_mem is None) else "flags"
    bf16 = bool(local) and all(_major(g.compute_capability) >= 8 for g in local)
    host_from = "flags" if host_mem is not None else "this machine"
    if host_mem is None:
        from paratrain.devices.inventory import cpu_info

        host_mem = (inv.cpu if inv else cpu_info()).memory_gib
    return Hardware(gpus=count, gpu_mem_gib=mem, link=link, nodes=nodes, host_mem_gib=host_mem,
                    source=source, host_from=host_from), bf16


def _major(capability: str | None) -> int:
    try:
        return int(str(capability).split(".")[0])
    except ValueError:
        return 0
