"""The comparison table and the ranked choice.

Ranking, in order: a method must fit (and, across nodes, be able to span them); a method ``compare`` has measured
on this model on GPUs ranks by what was measured, ahead of estimates; then using every GPU beats using one; then less
time on the link per step; then a method this paratrain can run; then the catalogue's order (simplest first).
Compute per sample is the same under every data-parallel method, so communication is what separates them.

Measurements are evidence only as far as the run could resolve them: methods whose measured speed-ups differ by less
than that run's noise (``compare``'s tie rule) tie, and a tie is broken by the estimates, saying so, never presented
as one method being faster. A measurement taken on CPU (gloo) says little about GPUs (this plan is always for GPUs):
it is set aside, with one note saying where it came from.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from paratrain import ac_modes
from paratrain.advise import comm, gpu_memory, memory
from paratrain.advise.memory import USABLE
from paratrain.advise.methods import MethodModel, all_methods
from paratrain.advise.models import ModelSpec, Transformer
from paratrain.bench.recommend import NOISE
from paratrain.strategies import registry

GIB = 1 << 30
MAX_SUGGESTED_GPUS = 4096


@dataclass(frozen=True, kw_only=True)
class Hardware:
    gpus: int  # per node
    gpu_mem_gib: float
    link: comm.Link
    nodes: int = 1
    host_mem_gib: float | None = None  # per node, for offloaded state; None: not checked
    source: str = "flags"  # "flags" or "this machine"
    host_from: str = "flags"  # where host_mem_gib came from: "flags" or "this machine" (not the planned one)

    @property
    def world(self) -> int:
        return self.gpus * self.nodes

    @property
    def usable_bytes(self) -> int:
        return int(self.gpu_mem_gib * GIB * USABLE)

    @property
    def usable_host_bytes(self) -> float | None:
        return None if self.host_mem_gib is None else self.host_mem_gib * GIB * USABLE


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
    misfit: str = ""  # why it does not fit ("" when it fits): the GPU's memory, or the host's for offloaded state
    misfit_where: str = ""  # "GPU" or "host": which memory is short, for the table's fits column
    reason: str = ""
    notes: list[str] = field(default_factory=list)
    bubble: float = 0.0  # the share of each step a pipeline's stages idle (pp), 0 for every other method
    reserved: int = 0  # the caching allocator's peak on a GPU (gpu_memory): total + fragmentation

    def to_json(self) -> dict[str, Any]:
        m = self.model
        replicated, sharded = m.layout()
        return {"method": m.spec, "framework": m.framework, "launcher": m.launcher,
                "processes": 1 if m.one_process else self.ranks, "devices": self.ranks, "multi_node": m.multi_node,
                "replicated": replicated, "sharded": sharded, "sharded_short": m.short_layout(), "label": m.label,
                "per_rank_bytes": {**self.memory.to_json(), "reserved": self.reserved},
                "fits": self.fits, "usable": self.usable,
                "unusable_because": self.unusable or None, "does_not_fit_because": self.misfit or None,
                "short_of": self.misfit_where or None, "runnable": m.runnable,
                "comm_bytes_per_step": self.comm_bytes, "host_bytes_per_step": self.host_bytes,
                "comm_s_per_step": self.comm_s, "bubble": self.bubble, "measured": self.measured,
                "notes": self.notes}


def _row(model: ModelSpec, m: MethodModel, hw: Hardware, plan: memory.Plan, framework: str) -> Row:
    ranks = 1 if m.spec == "single" else (hw.gpus if m.one_process else hw.world)
    mem = memory.rank_memory(model, m.sharding, replace(plan, ranks=ranks))
    p_b, g_b = memory.wire_bytes(m.sharding, plan.precision)
    outputs = block_io = 0
    if model.transformer is not None:
        arch = model.transformer
        one = _block_output_bytes(arch, plan)
        if m.comm == "dp":
            outputs = plan.micro_batch * (plan.seq_len or arch.seq_len) * arch.vocab * 4
        elif m.comm == "pp":  # the same samples as ranks data-parallel micro-batches; middle stages send both ways
            block_io = ranks * one * (1 if ranks == 2 else 2)
        elif m.comm == "fsdp_tp":  # each pair/group: its micro-batches' all-reduces
            block_io = m.sharding.tp_size * arch.layers * one
        elif m.comm == "tp":
            # for as many samples as the data-parallel rows take per step: one micro-batch per rank, each through all
            block_io = ranks * arch.layers * one
    if m.comm == "fsdp_tp":  # tp's all-reduces within a group, and FSDP's over the groups, of a group's slices
        tp = m.sharding.tp_size
        link_bytes = (comm.step_bytes("tp", 0, tp, p_b, g_b, 0, block_io)
                      + comm.step_bytes("shard_all", model.params // tp, max(1, ranks // tp), p_b, g_b))
    else:
        link_bytes = comm.step_bytes(m.comm, model.params, ranks, p_b, g_b, outputs, block_io)
    host = comm.host_bytes(m.sharding.offload, model.params, ranks, p_b, g_b)
    runs = registry.info(m.method).runs(framework)  # horovod runs Keras scripts too
    usable = runs and (hw.nodes == 1 or m.multi_node)
    row = Row(m, ranks, mem, True, usable, link_bytes, host, comm.seconds(link_bytes, host, hw.link),
              notes=list(mem.notes))
    tp = (m.sharding.tp_size or ranks) if m.sharding.tensor_parallel else 1
    row.reserved = gpu_memory.device_memory(model, replace(plan, ranks=ranks), mem, tp).reserved
    row.misfit_where, row.misfit = _misfit(mem, row.reserved, min(ranks, hw.gpus), hw)
    row.fits = not row.misfit
    if row.misfit_where == "host":
        row.notes.append(row.misfit)
    if m.comm in ("tp", "pp"):
        row.notes.append(f"communication for {ranks} micro-batches (the samples a data-parallel step takes)")
    if not runs:
        row.unusable = f"a {m.framework} method (planning for {framework}: --framework {m.framework})"
    elif not usable:
        row.unusable = "one machine only"
    elif refused := _refused_precision(m, plan.precision):
        row.usable, row.unusable = False, refused
    elif m.sharding.tp_size and (ranks % m.sharding.tp_size or hw.gpus % m.sharding.tp_size):
        row.usable, row.unusable = False, f"needs GPUs per node in groups of {m.sharding.tp_size}"
    elif m.sharding.tensor_parallel and (cut := _heads_cut(model, m.sharding.tp_size or ranks)):
        row.usable, row.unusable = False, cut
    elif m.sharding.pipeline and (short := _too_few_blocks(model, ranks)):
        row.usable, row.unusable = False, short
    if m.sharding.pipeline and ranks > 1:
        row.bubble = memory.bubble_fraction(ranks, memory.pipeline_chunks(ranks))
    return row


def _refused_precision(m: MethodModel, precision: str) -> str:
    """Why the method does not train in ``precision`` ("" when it does): ranking a method paratrain would refuse to
    start (fp16-mixed under fsdp, bf16-true under DeepSpeed) would advise a run that cannot be made."""
    info = registry.info(m.method)
    if info.framework != "torch" or info.precisions is None:
        return ""
    allowed = info.precisions
    if precision in allowed:
        return ""
    return f"does not run {precision} (it runs {', '.join(p for p in memory.PRECISIONS if p in allowed)})"


def _block_output_bytes(arch: Transformer, plan: memory.Plan) -> int:
    """One micro-batch's output of one block (batch × sequence × hidden), in the precision it travels in."""
    return plan.micro_batch * (plan.seq_len or arch.seq_len) * arch.hidden * (4 if plan.precision == "fp32" else 2)


def _too_few_blocks(model: ModelSpec, ranks: int) -> str | None:
    """Why pipeline parallelism cannot cut this model into ``ranks`` stages, or None."""
    if model.transformer is None:
        return "no blocks known for this model (a preset or --model hf:CONFIG has them)"
    if model.transformer.layers < ranks:
        return f"its {model.transformer.layers} blocks are fewer than {ranks} stages"
    return None


def _heads_cut(model: ModelSpec, ranks: int) -> str | None:
    """Why tensor parallelism cannot split this model over ``ranks`` (it never cuts an attention head), or None."""
    arch = model.transformer
    if arch is None or model.split_elements is None:
        return "no tensor-parallel plan known for this model (a preset or --model hf:CONFIG has one)"
    for what, count in (("attention heads", arch.heads), ("key/value heads", arch.kv_heads)):
        if count and count % ranks:
            return f"its {count} {what} do not divide by {ranks} ranks"
    return None


def _misfit(mem: memory.RankMemory, reserved: int, ranks_per_node: int, hw: Hardware) -> tuple[str, str]:
    """("GPU" or "host", why it does not fit), or ("", "") when it fits. On the GPU what runs out is the caching
    allocator's reserved memory, not the tensors' peak beneath it: Llama 3.1 8B on 8 GPUs at 2 × 8192 tokens
    allocates 71 GiB but reserves 81 (torchtitan measured 82.4), so it does not train on an 80 GB GPU. The host's
    share is stated in full because it is what a "no" beside a small GPU total means, and because the host memory
    may be this machine's, not the planned one's."""
    if max(mem.total, reserved) > hw.usable_bytes:
        return "GPU", (f"needs {_gib(reserved)} per GPU reserved ({_gib(mem.total)} allocated), "
                       f"{_gib(hw.usable_bytes)} usable")
    need, usable = mem.host * ranks_per_node, hw.usable_host_bytes
    if usable is None or need <= usable:
        return "", ""
    mine = " (this machine's: give --host-mem for the machine you plan for)" if hw.host_from == "this machine" else ""
    return "host", (f"offloaded state needs {_gib(need)} of host memory per node ({ranks_per_node} ranks × "
                    f"{mem.host / GIB:.3g} GiB), {_gib(usable)} usable of {hw.host_mem_gib:.3g} GiB{mine}")


def _key(row: Row, hw: Hardware, order: int, speed: float | None = None) -> tuple:
    """The sort key; ``speed``: the measured speed-up to rank by (a tie group's fastest, so ties fall through to
    the estimates)."""
    measured = row.measured is not None
    single_last = row.model.spec == "single" and hw.world > 1
    one_first = hw.world == 1 and row.model.spec != "single"
    if speed is None:
        speed = (row.measured or {}).get("speedup", 0.0)
    # advise has no compute-time model, so a pipeline's bubble, idle compute, cannot be weighed against link time:
    # a method without one goes first, and a measured run (compare) decides between them.
    return (not measured, -speed, single_last, one_first, row.bubble > 0, round(row.comm_s, 9),
            not row.model.runnable, order)


KEY_REASONS = {2: "every GPU used before one", 3: "one device before a distributed method on one GPU",
               4: "no pipeline bubble (idle compute advise cannot size)", 5: "less estimated time on the link per step",
               6: "a method this paratrain can run", 7: "the simpler method"}


def _noise(row: Row) -> float:
    return float((row.measured or {}).get("noise") or NOISE)


def _tie_groups(rows: list[Row]) -> list[list[Row]]:
    """The measured rows, fastest first, grouped into ties the way ``compare`` decides them: a row ties with the
    group's fastest when its speed-up is within the run's noise of it."""
    groups: list[list[Row]] = []
    for row in sorted((r for r in rows if r.measured), key=lambda r: -r.measured["speedup"]):
        lead = groups[-1][0] if groups else None
        if lead and row.measured["speedup"] >= lead.measured["speedup"] * (1 - max(_noise(lead), _noise(row))):
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _rank(rows: list[Row], hw: Hardware) -> tuple[list[Row], list[list[Row]]]:
    """The fitting, usable rows best first, and the measured ties among them (each in ranked order)."""
    order = {m.spec: i for i, m in enumerate(all_methods())}
    candidates = [r for r in rows if r.usable and r.fits]
    groups = _tie_groups(candidates)
    speed = {id(r): g[0].measured["speedup"] for g in groups for r in g}
    key = {id(r): _key(r, hw, order[r.model.spec], speed.get(id(r))) for r in candidates}
    ranked = sorted(candidates, key=lambda r: key[id(r)])
    ties = [sorted(g, key=lambda r: key[id(r)]) for g in groups if len(g) > 1]
    return ranked, ties


def _names(specs: list[str]) -> str:
    return specs[0] if len(specs) == 1 else ", ".join(specs[:-1]) + " and " + specs[-1]


def _broken_by(a: Row, b: Row, hw: Hardware) -> str:
    """Which estimate put ``a`` before ``b`` once their measurements tied."""
    ka, kb = _key(a, hw, 0, 0.0), _key(b, hw, 1, 0.0)
    index = next(i for i in range(2, len(ka)) if ka[i] != kb[i])
    if index == 5:
        return (f"{KEY_REASONS[5]} ({a.model.spec} ≈{_duration(a.comm_s)}, "
                f"{b.model.spec} ≈{_duration(b.comm_s)} on {hw.link.name})")
    return KEY_REASONS[index]


def _tie_line(group: list[Row], hw: Hardware) -> str:
    """One sentence: these methods tie on measurement, by how much, and what ranked them."""
    tie = max(_noise(r) for r in group)
    within = (f"within the measured spread, ±{tie * 100:.0f} %" if tie > NOISE
              else f"within run-to-run noise, ±{tie * 100:.0f} %")
    speeds = ", ".join(f"{r.measured['key']} {r.measured['speedup']:.2f}×" for r in group)
    how = list(dict.fromkeys(_broken_by(a, b, hw) for a, b in itertools.pairwise(group)))
    return (f"{_names([r.model.spec for r in group])} tie on measurement ({speeds} single, {within}; "
            f"run {group[0].measured['run']}); ranked by {', then '.join(how)}.")


def _attach(rows: list[Row], measured: dict[str, dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Give each row its measurement if it was taken on a GPU; return the ones set aside (taken on CPU)."""
    aside = [{"method": spec, **m} for spec, m in (measured or {}).items() if m.get("device", "gpu") != "gpu"]
    for row in rows:
        m = (measured or {}).get(row.model.spec)
        row.measured = m if m is not None and m.get("device", "gpu") == "gpu" else None
    return aside


def _aside_lines(aside: list[dict[str, Any]]) -> list[str]:
    """One line per run whose measurements were set aside: where they were taken, and that they were not used."""
    lines = []
    for run in dict.fromkeys(m["run"] for m in aside):
        mine = [m for m in aside if m["run"] == run]
        where = next((m["where"] for m in mine if "(" in m.get("where", "")), mine[0].get("where") or "CPU")
        keys = ", ".join(m["key"] for m in mine)
        lines.append(f"{keys} measured on {where} in run {run}: not used for this GPU plan (ranked by estimates).")
    return lines


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def _duration(seconds: float) -> str:
    return f"{seconds:.3g} s" if seconds >= 1 else f"{seconds * 1e3:.3g} ms"


def _reason(row: Row, hw: Hardware, tied: list[Row] | None = None) -> str:
    m, mem = row.model, row.memory
    parts = []
    if not row.usable:
        parts.append(f"not usable here: {row.unusable}")
    elif row.fits:
        parts.append(f"fits: {_gib(max(mem.total, row.reserved))} reserved of {_gib(hw.usable_bytes)} usable per GPU")
    else:
        parts.append(f"does not fit: {row.misfit}")
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
        others = [r.measured["key"] for r in tied or [] if r is not row]
        tie = f", a tie with {_names(others)} (±{max(map(_noise, tied or [row])) * 100:.0f} %)" if others else ""
        parts.append(f"measured: {row.measured['key']} {row.measured['speedup']:.2f}× single "
                     f"(run {row.measured['run']}){tie}")
    if not m.runnable:
        parts.append("not runnable by this version of paratrain yet")
    return "; ".join(parts)


def _first_fit(model: ModelSpec, hw: Hardware, plan: memory.Plan, framework: str) -> str | None:
    return next((m.spec for m in all_methods() if (r := _row(model, m, hw, plan, framework)).fits and r.usable), None)


def _what_would_fit(model: ModelSpec, hw: Hardware, plan: memory.Plan, framework: str) -> list[str]:
    """When nothing fits: the smallest changes that make something fit — on this hardware first, then with more
    GPUs (fsdp sharding the state further), each with and without activation checkpointing."""
    tips = []
    variants = [("", plan)]
    if not plan.checkpointing:
        variants.append(("activation checkpointing (--checkpointing)", replace(plan, checkpointing="full")))
    if plan.precision == "fp32":
        variants.append(("--precision bf16-mixed", replace(plan, precision="bf16-mixed")))
    for change, variant in variants:
        if change and (spec := _first_fit(model, hw, variant, framework)):
            tips.append(f"{change}: then {spec} fits")
            continue
        sharded = next(m for m in all_methods() if m.spec in ("fsdp", "deepspeed:zero3")
                       and not _refused_precision(m, variant.precision))
        for gpus in (2 ** k for k in range(1, 13)):
            if hw.gpus < gpus <= MAX_SUGGESTED_GPUS and _row(model, sharded, replace(hw, gpus=gpus), variant,
                                                               framework).fits:
                more = f"{gpus} GPUs per node ({sharded.spec} shards the state {gpus * hw.nodes} ways)"
                tips.append(f"{change} and {more}" if change else more)
                break
    if plan.micro_batch > 1:
        tips.append("a smaller --micro-batch (gradient accumulation keeps the global batch)")
    return tips


def advise(model: ModelSpec, hw: Hardware, plan: memory.Plan, *, framework: str = "torch",
           measured: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The table and the ranked recommendation, as the documented ``--json`` dict."""
    rows = [_row(model, m, hw, plan, framework) for m in all_methods()]
    aside = _attach(rows, measured)
    ranked, ties = _rank(rows, hw)
    tied_with = {id(r): g for g in ties for r in g}
    for row in rows:
        row.reason = _reason(row, hw, tied_with.get(id(row)))
    out: dict[str, Any] = {
        "model": {"name": model.name, "params": model.params, "note": model.note,
                  "shapes_known": model.shapes is not None},
        "plan": {"gpus_per_node": hw.gpus, "nodes": hw.nodes, "gpu_mem_gib": hw.gpu_mem_gib,
                 "usable_bytes_per_gpu": hw.usable_bytes, "hardware_from": hw.source,
                 "host_mem_gib": hw.host_mem_gib, "host_mem_from": hw.host_from,
                 "interconnect": {"name": hw.link.name, "gbps": hw.link.gbps}, "precision": plan.precision,
                 "optimizer": plan.optimizer, "micro_batch": plan.micro_batch,
                 "seq_len": plan.seq_len or (model.transformer.seq_len if model.transformer else None),
                 "checkpointing": ac_modes.parse(plan.checkpointing), "framework": framework},
        "methods": [r.to_json() for r in rows],
        "recommendation": [r.model.spec for r in ranked],
        "reasons": {r.model.spec: r.reason for r in rows},
        "ties": [[r.model.spec for r in g] for g in ties],
        "set_aside": aside,
        "notes": [_tie_line(g, hw) for g in ties] + _aside_lines(aside),
        "fixes": [] if ranked else _what_would_fit(model, hw, plan, framework),
    }
    return out
