"""``paratrain gpus``: what a launched job would run on, before you launch it.

Why a command of its own: most "why is DDP slow / why did it fall back to gloo" questions come down to four
facts: how many GPUs a job sees (``CUDA_VISIBLE_DEVICES``), how much memory is free, who else is using them,
and whether they talk over NVLink. This shows those facts; the data comes from :mod:`paratrain.devices`.
"""

from __future__ import annotations

import json

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from paratrain import console
from paratrain.devices import inventory
from paratrain.devices.inventory import GpuInfo, Inventory
from paratrain.devices.topology import LEGEND, Topology

NA = "n/a"

HELP = escape(
    "Show the GPUs on this machine: name, memory, utilisation, temperature, power, PCIe bus, compute "
    "capability, the processes using each one, and which ones a launched job would see "
    "(CUDA_VISIBLE_DEVICES is respected). Asks NVML first, then torch.cuda; with no GPU it says so and "
    "shows the CPU that training would use (gloo backend). Fields a GPU does not support show as n/a "
    "(null in JSON).\n\n"
    "--json prints: {source: nvml|torch|none, reason, driver, cuda, gpus: [{index, name, uuid, driver, cuda, "
    "memory_total_mib, memory_used_mib, memory_free_mib, utilization_pct, temperature_c, power_draw_w, "
    "power_limit_w, pci_bus_id, compute_capability, visible, processes: [{pid, user, name, memory_mib}]}], "
    "cpu: {cores, logical_cores, memory_gib}, visible: [physical indices a job sees, in its order], "
    "topology: null or {gpus: [indices], matrix: [[label, ...], ...]}}."
)


WIDE = 120  # at this terminal width the table also shows UUIDs and full PCIe bus ids


def _fmt(value: object, unit: str = "") -> str:
    return NA if value is None else f"{value}{unit}"


def _pair(used: object, total: object, unit: str = "") -> str:
    if used is None and total is None:
        return NA
    return f"{_fmt(used)}/{_fmt(total)}{unit}"


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:.0f}"


def _short_bus(bus: str | None, wide: bool) -> str:
    """"00000000:07:00.0" reads as "07:00.0" on a narrow terminal: the PCI domain is almost always 0."""
    if bus is None:
        return NA
    return bus if wide or not bus.startswith("00000000:") else bus[len("00000000:"):]


def _short_name(name: str | None, wide: bool) -> str:
    if name is None:
        return NA
    return name if wide or not name.startswith("NVIDIA ") else name[len("NVIDIA "):]


def _gpu_table(inv: Inventory, wide: bool) -> Table:
    """One row per GPU. Narrow terminals (80 columns) get short names and bus ids so no cell is cut off."""
    table = Table(title=f"GPUs (source: {inv.source})", title_justify="left", header_style="bold",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    columns = [("#", "right"), ("Name", "left"), ("Mem MiB", "right"), ("Util", "right"), ("Temp", "right"),
               ("Power W", "right"), ("Bus", "left"), ("CC", "right"), ("Job sees", "left")]
    if wide:
        columns.append(("UUID", "left"))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=name != "Name",  # type: ignore[arg-type]
                         min_width=8 if name == "Name" else None)
    for gpu in inv.gpus:
        order = inv.visible.index(gpu.index) if gpu.visible else None
        row = [
            str(gpu.index), escape(_short_name(gpu.name, wide)),
            _pair(gpu.memory_used_mib, gpu.memory_total_mib),
            _fmt(gpu.utilization_pct, "%"), _fmt(gpu.temperature_c, "C"),
            _pair(_watts(gpu.power_draw_w), _watts(gpu.power_limit_w)),
            escape(_short_bus(gpu.pci_bus_id, wide)),
            _fmt(gpu.compute_capability), "no" if order is None else f"cuda:{order}",
        ]
        if wide:
            row.append(escape(gpu.uuid or NA))
        table.add_row(*row, style=None if gpu.visible else "dim")
    return table


def _process_table(gpus: list[GpuInfo]) -> Table | None:
    rows = [(gpu.index, proc) for gpu in gpus for proc in gpu.processes]
    if not rows:
        return None
    table = Table(title="Processes", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    for name, justify in (("GPU", "right"), ("PID", "right"), ("User", "left"), ("Name", "left"),
                          ("Memory", "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for index, proc in rows:
        table.add_row(str(index), str(proc.pid), escape(proc.user or NA), escape(proc.name or NA),
                      _fmt(proc.memory_mib, " MiB"))
    return table


def _topology_table(topo: Topology) -> Table:
    table = Table(title="Topology", title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("")
    for index in topo.gpus:
        table.add_column(f"GPU{index}", justify="center")
    for index, row in zip(topo.gpus, topo.matrix, strict=True):
        table.add_row(f"[bold]GPU{index}[/bold]", *row)
    return table


def _cpu_text(inv: Inventory) -> str:
    return f"CPU: {inv.cpu.cores} cores, {inv.cpu.memory_gib:g} GiB"


def _no_gpu_message(inv: Inventory) -> str:
    return (f"No NVIDIA GPU found (NVML: {inv.nvml_reason}). {_cpu_text(inv)}; "
            "distributed training will use the gloo backend.")


def _render(inv: Inventory, show_topology: bool) -> None:
    if inv.source == "none":
        console.out.print(escape(_no_gpu_message(inv)))
        if show_topology:
            console.out.print("No GPU topology to show (NVML is not available).")
        return
    parts = [f"driver {inv.driver}" if inv.driver else None, f"CUDA {inv.cuda}" if inv.cuda else None]
    console.out.print(escape(" · ".join([f"{len(inv.gpus)} GPU(s)", *filter(None, parts), _cpu_text(inv)])))
    if inv.source == "torch":
        console.out.print(escape(f"[NVML unavailable: {inv.nvml_reason}; showing what torch.cuda reports.]"),
                  style="yellow")
    wide = console.out.width >= WIDE
    console.out.print(_gpu_table(inv, wide))
    if not wide:
        console.out.print("[dim]UUIDs and full PCIe bus ids: widen the terminal or use --json.[/dim]")
    if len(inv.visible) < len(inv.gpus):
        seen = ", ".join(str(i) for i in inv.visible) or "none"
        console.out.print(escape(f"CUDA_VISIBLE_DEVICES limits a launched job to GPU(s): {seen}."))
    processes = _process_table(inv.gpus)
    if processes is not None:
        console.out.print(processes)
    elif inv.source == "nvml":
        console.out.print("No running compute processes.")
    if show_topology:
        if inv.topology is None:
            console.out.print("No GPU topology to show (needs NVML).")
            return
        console.out.print(_topology_table(inv.topology))
        console.out.print("Legend:")
        for label, meaning in LEGEND:
            console.out.print(f"  {label:<4} = {escape(meaning)}")


def register(app: typer.Typer) -> None:
    """Add ``paratrain gpus`` to the app."""

    @app.command("gpus", help=HELP,
                 short_help="Show GPUs (memory, use, processes), what a job would see, and their topology.")
    def gpus(
        as_json: bool = typer.Option(False, "--json", help="Print the inventory as JSON (schema above)."),
        topology: bool = typer.Option(False, "--topology",
                                      help="Also show the GPU×GPU link matrix (NVLink / PCIe / CPU), "
                                      "like `nvidia-smi topo -m`."),
    ) -> None:
        inv = inventory.collect(topology=topology)
        if as_json:
            console.out.print(json.dumps(inv.to_json(), indent=2), markup=False, highlight=False, emoji=False,
                      soft_wrap=True)
            return
        _render(inv, topology)
