"""`paratrain compare`: every method × world size on a bundled workload or your script → table, report, plots."""

from __future__ import annotations

import datetime
import shlex
from pathlib import Path
from typing import Any

import typer
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from paratrain import console
from paratrain.cli._render import help_text, print_json
from paratrain.cli._train_flags import train_flags

HELP = """Run the training methods side by side, measure them, check they compute the same thing.

Each cell (method × number of processes) trains the same workload through `paratrain run`; paratrain
records step times, wall time per epoch, throughput, start-up time, peak memory and model-state bytes per
rank, and the loss curve, which must match the single-process curve (max |Δloss| ≤ 1e-5 in fp32) or, where
float order, dropout or BatchNorm make that impossible, stay within noise floors measured in the same run
(mean |Δloss| ≤ 3× the floor); otherwise the cell is NOT EQUIVALENT and cannot win.
Writes results.json, results.csv, report.md and PNG plots to --out, and a row in the history
database (`paratrain history`, `paratrain report RUN`).

Examples:
  paratrain compare                  # every method, 1 and 2 processes (GPUs: 1 and all)
  paratrain compare --full           # also the CNN (BatchNorm, dropout) and the small GPT
  paratrain compare -w llama -s single,fsdp,deepspeed:zero3 -n 2     # a transformers Llama
  paratrain compare --model hf:path/config.json --depth 2 --memory-per-rank 20
  paratrain compare --strategies ddp,fsdp:shard=grad_op --nproc 1,2,4
  paratrain compare --script train.py --script-args "--lr 3e-4"

Each cell runs in its own folder under --out; --out, --db, --script, a method's config file and any
--script-args that name an existing file or folder are taken from the current directory.
Exit status: 0 when at least one cell finished (failed cells are listed), 1 when no cell finished,
2 for bad input, 130 when interrupted.
"""


class LiveCells:
    """A live table with one row per cell: queued / running step k/N / done / failed with the reason."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}
        self.live = Live(self._render(), console=console.err, refresh_per_second=4, transient=False)
        self.started = False  # shown from the first cell on: a request refused while planning prints one line only

    def stop(self) -> None:
        if self.started:
            self.live.stop()

    def _render(self) -> Table:
        table = Table(title="paratrain compare", title_justify="left")
        table.add_column("cell")
        table.add_column("status")
        for key, text in self.rows.items():
            table.add_row(key, text)
        return table

    def update(self, key: str, text: str, cell: dict[str, Any] | None) -> None:
        if cell is not None:
            if cell["status"] == "ok":
                sps = cell.get("samples_per_s")
                text = f"[green]done[/] {sps:,.0f} samples/s" if sps else "[green]done[/]"
            else:
                text = f"[red]{escape(cell['status'])}[/]: {escape(str(cell.get('error') or ''))}"
        else:
            text = escape(text)
        self.rows[key] = text
        if not self.started:
            self.live.start()
            self.started = True
        self.live.update(self._render())


def _parse_nproc(text: str) -> list[int]:
    from paratrain.errors import ConfigError

    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f'--nproc "{text}" is not a comma-separated list of numbers',
                          hint="e.g. --nproc 1,2,4") from None


def _out_dir(out: str | None, workload: str) -> Path:
    from paratrain.errors import ConfigError

    if out:
        folder = Path(out)
        ours = (folder / "results.json").exists() or (folder / "sweep.json").exists()
        if folder.exists() and any(folder.iterdir()) and not ours:
            raise ConfigError(f"{folder} is not empty and holds no paratrain results; refusing to write into it",
                              hint="choose a new --out folder")
        return folder.resolve()  # cells run in folders of their own: every path they are given is absolute
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return (Path("runs") / f"compare-{workload}-{stamp}").resolve()


def _first_missing(folder: Path) -> Path | None:
    """The outermost folder on the way to ``folder`` that does not exist yet (what creating it makes)."""
    missing = None
    for path in (folder, *folder.parents):
        if path.exists():
            break
        missing = path
    return missing


def _remove_if_empty(made: Path | None) -> None:
    """Take back the folders a refused comparison made, if nothing was written into them."""
    if made is None or not made.is_dir():
        return
    if all(p.is_dir() for p in made.rglob("*")):
        for path in sorted(made.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            path.rmdir()
        made.rmdir()


def _writable(folder: Path) -> None:
    from paratrain.errors import ConfigError

    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / ".paratrain-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot write the results to {folder}: {exc.strerror or exc}",
                          hint="choose a writable --out folder") from None


@train_flags(("precision", "activation_checkpointing"), prefix="Every cell: ")
def compare(
    workload: str = typer.Option("mlp", "--workload", "-w", help="Bundled workload: mlp (digits), cnn (conv net with "
                                                           "BatchNorm + dropout, digits), gpt (char LM) or llama "
                                                           "(a transformers Llama, char LM; needs the hf extra)."),
    model: str = typer.Option(None, "--model", help="A Hugging Face model config to train instead: "
                                                    "hf:PATH/config.json (its causal LM on the gpt workload's text, "
                                                    "fresh weights, nothing downloaded; --width/--depth resize it)."),
    full: bool = typer.Option(False, "--full", help="Run the mlp, cnn and gpt workloads (llama: -w llama)."),
    script: str = typer.Option(None, "--script", help="Measure your own Session-based script instead."),
    script_args: str = typer.Option("", "--script-args", help='Arguments for --script, quoted: "--lr 3e-4".'),
    strategies: str = typer.Option(None, "--strategies", "-s",
                                   help="Comma-separated method specs, options included: "
                                        "single,ddp,deepspeed:zero3,offload (default: every method)."),
    nproc: str = typer.Option(None, "--nproc", "-n", help="World sizes to try, comma-separated (default: 1,2 on "
                              "CPU; on GPUs 1 and every visible GPU)."),
    steps: int = typer.Option(None, "--steps", help="Optimizer steps per cell (default: the workload's)."),
    warmup: int = typer.Option(5, "--warmup", help="Steps left out of the timing."),
    repeat: int = typer.Option(1, "--repeat", help="Runs per cell; the median run is reported."),
    scaling: str = typer.Option("strong", "--scaling", help="strong: global batch fixed; weak: per-rank batch fixed."),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds allowed per cell before it counts as failed."),
    width: int = typer.Option(None, "--width", help="Bundled workload size: hidden size (mlp), channels "
                                                                "(cnn), model dim (gpt, llama, --model)."),
    depth: int = typer.Option(None, "--depth", help="Transformer blocks (gpt, llama, --model)."),
    memory_per_rank: float = typer.Option(None, "--memory-per-rank", metavar="GIB",
                                          help="Memory each rank may use, in GiB. Cells of a bundled workload "
                                               "that advise's memory model says cannot fit are not started (they "
                                               "read 'does not fit: needs …'). On GPUs a cell whose measured "
                                               "peak exceeds it is not recommended. Default: on GPUs the "
                                               "device's usable memory; on CPU none."),
    sweep: str = typer.Option(None, "--sweep", help="Compare at several sizes of the bundled workload, e.g. "
                              "width=64,128,256: a report per size, and where the winner changes."),
    out_dir: str = typer.Option(None, "--out", help="Output folder (default runs/compare-<workload>-<time>/)."),
    db: str = typer.Option(None, "--db", help="History database (default ~/.paratrain/history.db or $PARATRAIN_HOME)."),
    json_out: bool = typer.Option(False, "--json", help="Print only the results JSON (no live table)."),
    **train: Any,
) -> int:
    from paratrain.bench import report, store
    from paratrain.bench.compare import CompareSettings, default_nproc, run_compare
    from paratrain.errors import ConfigError
    from paratrain.strategies import registry

    if full and script:
        raise ConfigError("--full runs the bundled workloads; it cannot be combined with --script")
    if model is not None:
        workload = _hf_workload(model, workload, script, full)
    if script and (width or depth):
        raise ConfigError("--width/--depth size the bundled workloads; pass your script's own flags in --script-args")
    workloads = ["mlp", "cnn", "gpt"] if full else [workload]
    sweep_key, sweep_values = (None, [None])
    if sweep:
        from paratrain.bench import sweep as sweeps

        if script or full:
            raise ConfigError("--sweep sizes one bundled workload; it cannot be combined with --script or --full")
        sweep_key, sweep_values = sweeps.parse(sweep)
        if (sweep_key == "width" and width) or (sweep_key == "depth" and depth):
            raise ConfigError(f"--sweep {sweep_key}=… and --{sweep_key} both set the {sweep_key}: give one")
    plan = [(name, value) for name in workloads for value in sweep_values]
    specs = registry.split_specs(strategies) if strategies else None
    for spec in specs or []:
        registry.resolve(spec)  # a typo is one line now, not after an empty live table
    all_results = []
    interrupted = False
    sweep_root = _out_dir(out_dir, f"{workload}-sweep") if sweep else None
    if sweep_root is not None:
        _writable(sweep_root)
    for name, value in plan:
        size = {"width": width, "depth": depth, **({sweep_key: value} if sweep_key else {})}
        settings = CompareSettings(workload=None if script else name, script=script,
                                   script_args=shlex.split(script_args), strategies=specs,
                                   nproc=_parse_nproc(nproc) if nproc else default_nproc(),
                                   steps=steps, warmup=warmup, repeat=repeat, scaling=scaling, timeout=timeout,
                                   width=size["width"], depth=size["depth"], precision=train.get("precision"),
                                   activation_checkpointing=train.get("activation_checkpointing") or False,
                                   memory_per_rank=memory_per_rank)
        if sweep_root is not None:
            folder = sweep_root / f"{sweep_key}-{value}"
        else:
            folder = _out_dir(out_dir if len(workloads) == 1 else (f"{out_dir}/{name}" if out_dir else None),
                              "script" if script else _slug(name))
        made = _first_missing(folder)
        _writable(folder)
        try:
            if json_out:
                results = run_compare(settings, folder)
            else:
                live = LiveCells()
                try:
                    results = run_compare(settings, folder, live.update)
                finally:
                    live.stop()
        except ConfigError:  # refused while planning: leave no empty folder behind
            _remove_if_empty(made)
            raise
        paths = report.write_outputs(results, folder)
        store.save_run(results, folder, Path(db).expanduser().resolve() if db else None)
        all_results.append(results)
        if not json_out:
            console.out.print(report.results_table(results))
            for line in results["recommendation"]["lines"]:
                console.out.print(f"• {escape(line)}")
            console.out.print(f"\nreport: {paths.get('report', folder / 'report.md')}   run id: {results['id']}")
        if results.get("interrupted"):
            interrupted = True
            break
    if sweep_root is not None and not interrupted:
        summary = sweeps.summarize(sweep_key, list(zip(sweep_values, all_results, strict=False)))
        sweeps.write(summary, sweep_root)
        if not json_out:
            console.out.print(f"\n{escape(summary['summary'])}\nsweep: {sweep_root / 'sweep.md'}")
    if json_out:
        print_json(all_results[0] if len(all_results) == 1 else all_results)
    if interrupted:
        console.err.print("paratrain: interrupted — finished cells were kept in the report above")
        return 130
    _nothing_measured(all_results)
    return 0


def _hf_workload(model: str, workload: str, script: str | None, full: bool) -> str:
    """``--model hf:PATH`` as the workload name the cells train (``hf:`` + the config's absolute path, so a relative
    PATH means the current folder's file in every cell's own folder)."""
    from paratrain.errors import ConfigError
    from paratrain.workloads import hf_config

    if not hf_config.is_hf(model):
        raise ConfigError(f'compare --model "{model}" must be a Hugging Face config: hf:PATH/config.json',
                          hint="presets and --params size a model on paper: paratrain advise --model …")
    if script or full or workload != "mlp":
        raise ConfigError("--model trains a Hugging Face config; it cannot be combined with --script, --full or "
                          "--workload", hint="give one of them")
    return hf_config.PREFIX + str(hf_config.config_path(model))


def _slug(name: str) -> str:
    from paratrain.workloads import get

    return get(name).slug if name.startswith("hf:") else name


def _nothing_measured(all_results: list[dict]) -> None:
    """Exit 1 (with the last line saying so) when a comparison measured no cell at all: a report of failures only
    must not read as success to a script or CI job. Some cells failing while others finished is still exit 0."""
    from paratrain.errors import LaunchError

    empty = [r for r in all_results if not any(c.get("status") == "ok" for c in r["cells"])]
    if empty:
        cells = [c for r in empty for c in r["cells"]]
        failed = sum(c.get("status") not in ("ok", "unavailable", "does_not_fit") for c in cells)
        raise LaunchError(f"no cell finished ({failed} failed, {len(cells) - failed} not run): nothing was "
                          f"measured in {', '.join(r['id'] for r in empty)}",
                          hint="each cell's reason is listed above; its full output is in cells/<cell>/run1/log.txt")


def register(app: typer.Typer) -> None:
    app.command("compare", help=help_text(HELP))(compare)
