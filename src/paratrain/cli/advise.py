"""``paratrain advise``: per-rank memory and communication of every method for one model, and a ranked choice."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from paratrain import ac_modes, console
from paratrain.cli._render import help_text, print_json
from paratrain.errors import ConfigError, did_you_mean

HELP = help_text("""
Size a model for every training method before you run it: per-GPU memory (parameters, gradients, optimizer
state, activations, working buffers), bytes sent per optimizer step and their time on your link, whether it
fits, and a ranked recommendation with reasons. Measurements `paratrain compare` recorded for the same model on GPUs
are shown beside the estimates and outrank them; methods whose measurements differ by less than that run's
spread tie and are ranked by the estimates (a note says so); measurements taken on CPU are not used, and a note
says which run they came from.

The model: --params N, or --model with a preset (gpt2, gpt2-medium, gpt2-xl, llama-7b, llama-13b, llama-70b),
a bundled workload (mlp, cnn, gpt; sized with --width/--depth as in compare) or package.module:factory (built on the
meta device, nothing allocated; return (module, example_inputs) to count activations too). The hardware:
--gpus (per node), --gpu-mem (GiB), --nodes, --interconnect; on a GPU machine, what is not given comes from this
machine (`paratrain gpus`). Memory is counted the ZeRO paper's way (mixed precision: 16-bit parameters and
gradients, fp32 master weights in the optimizer share); 90 % of a GPU's memory counts as usable. --simulate also
runs one step of the model's own code under each torch method on fake tensors (nothing allocated, a fake process
group of the target size) and shows that peak beside the formula's.

Examples:

  paratrain advise --params 1.3e9 --gpus 8 --gpu-mem 80
  paratrain advise --model llama-7b --gpus 8 --gpu-mem 40 --nodes 2
  paratrain advise --model hf:Llama-3.1-8B/config.json --seq-len 8192 --gpus 8 --gpu-mem 80 --checkpointing op
  paratrain advise --model gpt --width 256 --gpus 2 --gpu-mem 8 --json
""")


def _choice(flag: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f'{flag} "{value}" is not one of {", ".join(allowed)}.{did_you_mean(value, allowed)}')
    return value


def _num(x: float) -> str:
    if x == 0:
        return "0"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 0.01 else f"{x:.1e}"


def _g(n: float | None) -> str:
    return "?" if n is None else _num(n / (1 << 30))


def _host_words(plan: dict) -> str:
    """The host memory offloaded state is checked against, and whose it is: by default this machine's, which is
    not the machine being planned when --gpus/--gpu-mem describe another."""
    if plan.get("host_mem_gib") is None:
        return ""
    whose = " (this machine's; --host-mem)" if plan.get("host_mem_from") == "this machine" else ""
    return f"; host memory {plan['host_mem_gib']:.3g} GiB per node{whose}"


def _fits_cell(row: dict) -> str:
    """yes / no (GPU) / no (host) / n/a: a "no" says which memory is short, the lines under the table say by how
    much (an offloaded method's GPU total is small, so a bare "no" beside it read as a mistake)."""
    if not row["usable"]:
        return "n/a"
    if row["fits"]:
        return "[green]yes[/]"
    return f"[red]no ({row.get('short_of') or 'GPU'})[/]"


def _fit_lines(rows: list[dict]) -> list[str]:
    """Why a row says "no (host)" or "n/a", one line per reason. "no (GPU)" needs none: its total is above the
    usable memory in the title."""
    lines = [f"no (host) {row['label']}: {row['does_not_fit_because']}" for row in rows
             if row["usable"] and row.get("short_of") == "host"]
    unusable: dict[str, list[str]] = {}
    for row in rows:
        if not row["usable"]:
            unusable.setdefault(row["unusable_because"] or "not usable here", []).append(row["label"])
    lines += [f"n/a {', '.join(labels)}: {why}" for why, labels in unusable.items()]
    return lines


def _render(result: dict) -> None:
    from paratrain.advise.memory import peak_parts

    plan, model = result["plan"], result["model"]
    out = console.out
    link = plan["interconnect"]
    out.print(f"[bold]{escape(model['name'])}[/]" + (f" ({escape(model['note'])})" if model["note"] else "")
              + f": {model['params']:,} parameters. {plan['gpus_per_node']} GPU(s) × {plan['nodes']} node(s), "
              f"{plan['gpu_mem_gib']:.3g} GiB each (from {plan['hardware_from']}), {escape(link['name'])} "
              f"{link['gbps']:.3g} GB/s; {plan['precision']}, {plan['optimizer']}, micro-batch {plan['micro_batch']}"
              + (f", sequence {plan['seq_len']}" if plan["seq_len"] else "")
              + (f", {ac_modes.words(plan['checkpointing'])}" if plan["checkpointing"] else "") + _host_words(plan),
              highlight=False)
    usable = plan["usable_bytes_per_gpu"] / (1 << 30)
    mem = Table(title=f"Memory per GPU in GiB ({usable:.3g} usable), busiest rank at its peak (grads: those backward "
                "has made by then, act: activations, buf: working buffers, total: peak allocated, reserved: the "
                "caching allocator's peak, host: offloaded, per rank)",
                title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("method", "params", "grads", "optim", "act", "buf", "total", "reserved", "host", "fits"):
        mem.add_column(col, justify="left" if col == "method" else "right", no_wrap=col == "method")
    how = Table(title="How each one runs (GB sent per rank per optimizer step, and ms for it on the link)",
                title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("method", "launcher", "procs", "nodes", "sharded", "GB", "ms", "measured"):
        how.add_column(col, justify="right" if col in ("procs", "GB", "ms") else "left",
                       no_wrap=col == "method")
    for row in result["methods"]:
        b = row["per_rank_bytes"]
        name = escape(row["label"]) if row["runnable"] else f"[dim]{escape(row['label'])}*[/]"
        fits = _fits_cell(row)
        alive = peak_parts(b)
        mem.add_row(name, _g(b["params"]), _g(alive["grads"]), _g(b["optimizer"]),
                    _g(alive["activations"] if b["activations"] is not None else None), _g(alive["buffers"]),
                    _g(b["total"]), _g(b["reserved"]), _g(b["host"]), fits)
        measured = row["measured"]
        how.add_row(name, row["launcher"], str(row["processes"]),
                    "any" if row["multi_node"] else "1", escape(row["sharded_short"]),
                    _num(row["comm_bytes_per_step"] / 1e9), _num(row["comm_s_per_step"] * 1e3),
                    f"{measured['key']} {measured['speedup']:.2f}×" if measured else "")
    out.print(mem)
    for line in _fit_lines(result["methods"]):
        out.print(f"[dim]{escape(line)}[/]", highlight=False)
    out.print(how)
    out.print("[dim]ds = deepspeed, +off = offload (o: optimizer), sharded: p params, g gradients, o optimizer "
              "state; * not runnable by this version of paratrain yet (`paratrain strategies`).[/]")
    ranked = result["recommendation"]
    if not ranked:
        fixes = "; ".join(result["fixes"]) or "a GPU with more memory"
        out.print(f"[bold red]Nothing fits[/] on this hardware. What would make it fit: {escape(fixes)}.")
    else:
        out.print("[bold]Recommendation[/]")
        for i, spec in enumerate(ranked[:3], 1):
            out.print(f"  {i}. [bold]{escape(spec)}[/]: {escape(result['reasons'][spec])}", highlight=False)
        if len(ranked) > 3:
            out.print(f"  then: {escape(', '.join(ranked[3:]))}", highlight=False)
    for note in result["notes"]:  # measured ties, and measurements set aside (taken on CPU)
        out.print(f"[dim]•[/] {escape(note)}", highlight=False)


def advise(
    params: float = typer.Option(None, "--params", help="Number of parameters, e.g. 1.3e9."),
    model: str = typer.Option(None, "--model", help="A preset (llama3-8b …), mlp/cnn/gpt/llama (bundled), a local "
                                                    "Hugging Face config hf:PATH/config.json, or "
                                                    "package.module:factory."),
    width: int = typer.Option(None, "--width", help="Bundled workload or hf: config size, as in `compare`."),
    depth: int = typer.Option(None, "--depth", help="Transformer blocks (gpt, llama, hf:), as in `compare`."),
    gpus: int = typer.Option(None, "--gpus", help="GPUs per node (default: this machine's)."),
    gpu_mem: float = typer.Option(None, "--gpu-mem", help="Memory per GPU in GiB (default: this machine's)."),
    nodes: int = typer.Option(1, "--nodes", help="Machines."),
    interconnect: str = typer.Option(None, "--interconnect",
                                     help="nvlink, pcie, infiniband, ethernet, or GB/s: the slowest link the "
                                          "ring crosses (default: this machine's topology; ethernet across nodes)."),
    host_mem: float = typer.Option(None, "--host-mem", help="Host memory per node in GiB, for offloaded state "
                                   "(default: this machine's)."),
    probe: bool = typer.Option(False, "--probe", help="Measure the link here with an all-reduce instead."),
    precision: str = typer.Option(None, "--precision",
                                  help="fp32, bf16-mixed, fp16-mixed, bf16-true (default: bf16-mixed on GPUs here that "
                                       "support it, else fp32)."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="sgd, sgd-momentum, adam, adamw."),
    seq_len: int = typer.Option(None, "--seq-len", help="Sequence length (default: the model's)."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Samples per GPU per forward pass."),
    checkpointing: str = typer.Option(None, "--checkpointing", metavar="MODE",
                                      help="Activation checkpointing: full (the flag alone: each block keeps only "
                                           "its input), op (selective: also the outputs of attention and every "
                                           "other matrix multiply), every:N (every N-th block), none (default)."),
    framework: str = typer.Option("torch", "--framework", help="torch or tensorflow: the methods to rank."),
    db: Path = typer.Option(None, "--db", help="Run history to read measurements from (default: compare's)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    simulate: bool = typer.Option(False, "--simulate", help="Also run one training step of the model (--model) under "
                                  "each torch method on fake tensors at this world size: its simulated peak per GPU "
                                  "beside the formula's (docs/advise.md)."),
) -> None:
    from paratrain.advise import hardware, measured, memory, methods, models, recommend

    _choice("--optimizer", optimizer, memory.OPTIMIZERS)
    _choice("--framework", framework, methods.FRAMEWORKS)
    if precision is not None:
        _choice("--precision", precision, memory.PRECISIONS)
    for flag, value in (("--micro-batch", micro_batch), ("--seq-len", seq_len)):
        if value is not None and not 1 <= value <= 10_000_000:
            raise ConfigError(f"{flag} {value} must be between 1 and 10000000")
    spec = models.resolve(model, params, width, depth, seq_len)
    hw, bf16 = hardware.resolve(gpus=gpus, gpu_mem=gpu_mem, nodes=nodes, interconnect=interconnect, probe=probe,
                                host_mem=host_mem)
    plan = memory.Plan(ranks=hw.world, micro_batch=micro_batch, seq_len=seq_len,
                       precision=precision or ("bf16-mixed" if bf16 else "fp32"), optimizer=optimizer,
                       checkpointing=ac_modes.parse(checkpointing))
    result = recommend.advise(spec, hw, plan, framework=framework,
                              measured=measured.measurements(spec.params, hw.world, db))
    if simulate:  # the model's own code, stepped on fake tensors (advise/simulate.py)
        from paratrain.advise import simulate as sim
        from paratrain.advise import simulate_models

        sim.attach(result, simulate_models.trainable(model, width, depth), plan)
    if json_out:
        print_json(result)
    else:
        _render(result)
        if simulate:
            sim.render(result)


def register(app: typer.Typer) -> None:
    app.command("advise", help=HELP)(advise)
