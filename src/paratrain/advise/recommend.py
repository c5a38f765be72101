"""The comparison table and the ranked choice.

Ranking, in order: a method must fit (and, across nodes, be able to span them); a method ``compare`` has measured
on this model ranks by what was measured, ahead of estimates; then using every GPU beats using one; then less
time on the link per step; then a method this paratrain can run; then the catalogue's order (simplest first).
Compute per sample is the same under every data-parallel method, so communication is what separates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from paratrain.advise import comm, memory
from paratrain.advise.methods import METHODS, MethodModel
from paratrain.advise.models import ModelSpec

GIB = 1 << 30
USABLE = 0.9  # of a GPU's memory: the CUDA context, allocator fragmentation and temporaries take the rest
MAX_SUGGESTED_GPUS = 4096


@dataclass(frozen=True, kw_only=True)
class Hardware:
    gpus: int  # per node
    gpu_mem_gib: float
    link: comm.Link
    nodes: int = 1
    host_mem_gib: float | None = None  # per node, for offloaded state; None: not checked
    source: str = "flags"  # "flags" or "this machine"

    @property
    def world(self) -> int:
        return self.gpus * self.nodes

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_mem_gib * GIB * USABLE)


@dataclass
class Row:
    model: MethodModel
    ranks: int
    memory: memory.RankMemory
    fits: bool
    usable: bool  # False: cannot be used on this hardware (one machine only, other framework)
    comm_bytes: int
    host_bytes: int
    comm_s: float
    measured: dict[str, Any] | None = None
    unusable: str = ""  # why it cannot be used on this hardware
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        m = self.model
        replicated, sharded = m.layout()
        return {"method": m.spec, "framework": m.framework, "launcher": m.launcher,
                "processes": 1 if m.one_process else self.ranks, "devices": self.ranks, "multi_node": m.multi_node,
                "replicated": replicated, "sharded": sharded, "sharded_short": m.short_layout(), "label": m.label,
                "per_rank_bytes": self.memory.to_json(), "fits": self.fits, "usable": self.usable,
                "unusable_because": self.unusable or None, "runnable": m.runnable,
                "comm_bytes_per_step": self.comm_bytes, "host_bytes_per_step": self.host_bytes,
                "comm_s_per_step": self.comm_s, "measured": self.measured, "notes": self.notes}


def _row(model: ModelSpec, m: MethodModel, hw: Hardware, plan: memory.Plan, framework: str) -> Row:
    ranks = 1 if m.spec == "single" else (hw.gpus if m.one_process else hw.world)
    mem = memory.rank_memory(model, m.sharding, replace(plan, ranks=ranks))
    p_b, g_b, _ = memory.element_bytes(plan.precision, plan.optimizer)
    outputs = 0
    if m.comm == "dp" and model.transformer is not None:
        outputs = plan.micro_batch * (plan.seq_len or model.transformer.seq_len) * model.transformer.vocab * 4
    link_bytes = comm.step_bytes(m.comm, model.params, ranks, p_b, g_b, outputs)
    host = comm.host_bytes(m.sharding.offload, model.params, ranks, p_b, g_b)
    usable = m.framework == framework and (hw.nodes == 1 or m.multi_node)
    host_fits = hw.host_mem_gib is None or mem.host * min(ranks, hw.gpus) <= hw.host_mem_gib * GIB * USABLE
    row = Row(m, ranks, mem, mem.total <= hw.usable_bytes and host_fits, usable, link_bytes, host,
              comm.seconds(link_bytes, host, hw.link), notes=list(mem.notes))
    if not host_fits:
        row.notes.append(f"offloaded state needs {_gib(mem.host * min(ranks, hw.gpus))} of host memory per node, "
                         f"{hw.host_mem_gib:.0f} GiB there")
    if m.framework != framework:
        row.unusable = f"a {m.framework} method (planning for {framework}: --framework {m.framework})"
    elif not usable:
        row.unusable = "one machine only"
    return row


def _key(row: Row, hw: Hardware, order: int) -> tuple:
    measured = row.measured is not None
    single_last = row.model.spec == "single" and hw.world > 1
    one_first = hw.world == 1 and row.model.spec != "single"
    return (not measured, -(row.measured or {}).get("speedup", 0.0), single_last, one_first,
            round(row.comm_s, 9), not row.model.runnable, order)


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _duration(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _reason(row: Row, hw: Hardware) -> str:
    m, mem = row.model, row.memory
    parts = []
    if not row.usable:
        parts.append(f"not usable here: {row.unusable}")
    elif row.fits:
        parts.append(f"fits: {_gib(mem.total)} of {_gib(hw.usable_bytes)} usable per GPU")
    elif mem.total > hw.usable_bytes:
        parts.append(f"does not fit: needs {_gib(mem.total)} per GPU, {_gib(hw.usable_bytes)} usable")
    else:
        parts.append("does not fit: " + row.notes[-1])
    if mem.activations is None:
        parts.append("activations not counted")
    if mem.host:
        parts.append(f"{_gib(mem.host)} of host memory per rank")
    if row.comm_bytes or row.host_bytes:
        parts.append(f"sends {row.comm_bytes / 1e9:.3g} GB per step"
                     + (f" and moves {row.host_bytes / 1e9:.3g} GB to and from the host" if row.host_bytes else "")
                     + f" (≈{_duration(row.comm_s)} on {hw.link.name})")
    parts.append(m.what)
    if row.measured:
        parts.append(f"measured: {row.measured['key']} {row.measured['speedup']:.2f}× single "
                     f"(run {row.measured['run']})")
    if not m.runnable:
        parts.append("not runnable by this version of paratrain yet")
    return "; ".join(parts)


def _first_fit(model: ModelSpec, hw: Hardware, plan: memory.Plan, framework: str) -> str | None:
    return next((m.spec for m in METHODS if (r := _row(model, m, hw, plan, framework)).fits and r.usable), None)


def _what_would_fit(model: ModelSpec, hw: Hardware, plan: memory.Plan, framework: str) -> list[str]:
    """When nothing fits: the smallest changes that make something fit — on this hardware first, then with more
    GPUs (fsdp sharding the state further), each with and without activation checkpointing."""
    tips = []
    variants = [("", plan)]
    if not plan.checkpointing:
        variants.append(("activation checkpointing (--checkpointing)", replace(plan, checkpointing=True)))
    if plan.precision == "fp32":
        variants.append(("--precision bf16-mixed", replace(plan, precision="bf16-mixed")))
    for change, variant in variants:
        if change and (spec := _first_fit(model, hw, variant, framework)):
            tips.append(f"{change}: then {spec} fits")
            continue
        sharded = next(m for m in METHODS if m.spec == "fsdp")
        for gpus in (2 ** k for k in range(1, 13)):
            if hw.gpus < gpus <= MAX_SUGGESTED_GPUS and _row(model, sharded, replace(hw, gpus=gpus), variant,
                                                               framework).fits:
                more = f"{gpus} GPUs per node (fsdp shards the state {gpus * hw.nodes} ways)"
                tips.append(f"{change} and {more}" if change else more)
                break
    if plan.micro_batch > 1:
        tips.append("a smaller --micro-batch (gradient accumulation keeps the global batch)")
    return tips


def advise(model: ModelSpec, hw: Hardware, plan: memory.Plan, *, framework: str = "torch",
           measured: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The table and the ranked recommendation, as the documented ``--json`` dict."""
    rows = [_row(model, m, hw, plan, framework) for m in METHODS]
    for row in rows:
        row.measured = (measured or {}).get(row.model.spec)
        row.reason = _reason(row, hw)
    order = {m.spec: i for i, m in enumerate(METHODS)}
    ranked = sorted((r for r in rows if r.usable and r.fits), key=lambda r: _key(r, hw, order[r.model.spec]))
    out: dict[str, Any] = {
        "model": {"name": model.name, "params": model.params, "note": model.note,
                  "shapes_known": model.shapes is not None},
        "plan": {"gpus_per_node": hw.gpus, "nodes": hw.nodes, "gpu_mem_gib": hw.gpu_mem_gib,
                 "usable_bytes_per_gpu": hw.usable_bytes, "hardware_from": hw.source,
                 "host_mem_gib": hw.host_mem_gib,
                 "interconnect": {"name": hw.link.name, "gbps": hw.link.gbps}, "precision": plan.precision,
                 "optimizer": plan.optimizer, "micro_batch": plan.micro_batch,
                 "seq_len": plan.seq_len or (model.transformer.seq_len if model.transformer else None),
                 "checkpointing": plan.checkpointing, "framework": framework},
        "methods": [r.to_json() for r in rows],
        "recommendation": [r.model.spec for r in ranked],
        "reasons": {r.model.spec: r.reason for r in rows},
        "fixes": [] if ranked else _what_would_fit(model, hw, plan, framework),
    }
    return out
