"""`paratrain compare` as a library: plan the cells, run them one by one, assemble the results.

Cells run one after another (never two at once: they would measure each other). A failing cell never stops the
comparison; Ctrl-C stops the running cell's processes and keeps what finished.
"""

from __future__ import annotations

import datetime
import math
import platform
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from paratrain import __version__, ac_modes
from paratrain.bench import budget as budget_
from paratrain.bench import disturbance, equivalence
from paratrain.bench.finalize import EQUIVALENCE_TOL, finalize
from paratrain.bench.runner import CellSpec, run_cell
from paratrain.errors import ConfigError
from paratrain.launcher.config import DEFAULT_CONFIG, script_framework, script_path
from paratrain.launcher.threads import available_cores
from paratrain.strategies import registry
from paratrain.strategies.base import format_spec

if TYPE_CHECKING:
    from paratrain.workloads import Workload

PROFILE_STEPS = 3  # steps under the torch profiler per cell (breakdown of communication)
WORKLOAD_SCRIPT = str(Path(__file__).resolve().parents[1] / "workloads" / "train.py")
KERAS_SCRIPT = str(Path(__file__).resolve().parents[1] / "workloads" / "train_keras.py")
KERAS_WORKLOADS = ("mlp",)  # bundled workloads with a Keras twin
Progress = Callable[[str, str, dict[str, Any] | None], None]  # (cell key, status text, finished cell or None)


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    workload: str | None = "mlp"
    script: str | None = None
    script_args: list[str] = field(default_factory=list)
    strategies: list[str] | None = None  # None: every torch method in the registry
    nproc: list[int] = field(default_factory=lambda: default_nproc())
    steps: int | None = None
    warmup: int = 5
    repeat: int = 1
    scaling: Literal["strong", "weak"] = "strong"
    timeout: float = 300.0
    width: int | None = None  # bundled workload size: hidden size (mlp) / model dimension (gpt)
    depth: int | None = None  # transformer blocks (gpt)
    precision: str | None = None  # a training option for every cell (paratrain run --precision); None: fp32
    activation_checkpointing: bool | str = False  # every torch cell's mode (paratrain/ac_modes.py); False: none
    memory_per_rank: float | None = None  # GiB each rank may use (bench/budget.py); None: on GPUs, the device's

    def __post_init__(self) -> None:
        if not self.nproc or any(n < 1 for n in self.nproc):
            raise ConfigError(f"--nproc {','.join(map(str, self.nproc))} must list numbers ≥ 1, e.g. 1,2")
        if self.repeat < 1 or self.warmup < 0 or (self.steps is not None and self.steps < 1):
            raise ConfigError("--repeat and --steps must be ≥ 1 and --warmup ≥ 0")
        if self.steps is not None and self.warmup >= self.steps:
            raise ConfigError(f"--warmup {self.warmup} leaves no measured steps out of --steps {self.steps}",
                              hint="use fewer warm-up steps or more steps")
        if self.precision is not None:
            from paratrain import options

            options.given({"precision": self.precision})
        object.__setattr__(self, "activation_checkpointing", ac_modes.parse(self.activation_checkpointing))
        if self.memory_per_rank is not None and not 0 < self.memory_per_rank < math.inf:
            raise ConfigError(f"--memory-per-rank {self.memory_per_rank:g} must be a positive number of GiB, e.g. 0.5")
        if self.scaling not in ("strong", "weak"):
            raise ConfigError(f'--scaling "{self.scaling}" must be strong or weak')
        if self.script is not None:
            script_path(self.script, hint="give the path of a Session-based or Keras script")
            _config_file()  # its checkpoint_dir is refused here, before anything is written


@dataclass
class Cell:
    spec: CellSpec | None
    strategy: str  # as the user wrote it (deepspeed:zero1): what the table, plots and keys show
    nproc: int
    reason: str = ""  # why it cannot run, for unavailable cells
    normalized: str = ""  # the canonical spelling (deepspeed:zero_stage=1), for code that compares methods
    framework: str = ""  # of the training it runs (horovod runs a Keras script as a Keras cell); "" = the method's
    predicted: dict[str, Any] | None = None  # advise's bytes for its busiest rank (bench/budget.py)
    status: str = "unavailable"  # of a cell that is not run: unavailable, or does_not_fit under a memory budget

    @property
    def key(self) -> str:
        return f"{self.strategy}×{self.nproc}"


def _workload(settings: CompareSettings) -> Workload | None:
    """The bundled workload being compared, or None when measuring the user's --script."""
    if settings.script:
        return None
    from paratrain.workloads import get

    return get(settings.workload or "mlp")


def _script_args(settings: CompareSettings) -> tuple[str, list[str]]:
    workload = _workload(settings)
    if workload is None:  # absolute: each cell runs in its own working directory
        return str(Path(str(settings.script)).resolve()), absolute_inputs(settings.script_args)
    args = ["--workload", workload.name, "--steps", str(settings.steps or workload.steps)]
    if settings.scaling == "weak":
        args += ["--per-rank-batch"]
    for flag, value in (("--width", settings.width), ("--depth", settings.depth)):
        if value is not None:
            args += [flag, str(value)]
    return WORKLOAD_SCRIPT, args


def absolute_inputs(args: list[str]) -> list[str]:
    """The script's arguments with every one that names an existing file or folder (``data.csv``,
    ``--data=data/``) made absolute, so the script reads what the user meant from the cell's own working directory.
    A path that does not exist yet is an output, and stays relative: it lands in the cell's folder, where one
    method's checkpoints cannot be resumed by the next."""
    out = []
    for arg in args:
        flag, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if value and not Path(value).is_absolute() and Path(value).exists():
            value = str(Path(value).resolve())
        out.append(f"{flag}{eq}{value}")
    return out


def _config_file() -> Path | None:
    """The paratrain.toml of the folder compare was started from. Its checkpoint_dir must be relative: each cell
    then writes its own checkpoints in its own folder; an absolute one would let every cell resume the one before."""
    file = Path(DEFAULT_CONFIG)
    if not file.is_file():
        return None
    from paratrain.launcher.config import load_config

    folder = load_config(str(file)).get("checkpoint_dir")
    if folder and Path(str(folder)).expanduser().is_absolute():
        raise ConfigError(f"{file.resolve()} sets checkpoint_dir = {folder!r}: every compare cell would write and "
                          "resume the same checkpoints", hint="make it relative (each cell then keeps its own "
                          "under its folder), or remove it for the comparison")
    return file.resolve()


def _run_flags(settings: CompareSettings) -> list[str]:
    """`paratrain run` flags every cell gets: the precision and activation checkpointing; for a user's script, weak
    scaling through the per-rank batch, and the paratrain.toml of the folder compare was started from (cells run
    elsewhere)."""
    flags = ["--precision", settings.precision] if settings.precision else []
    if settings.activation_checkpointing:
        flags += ["--activation-checkpointing", str(settings.activation_checkpointing)]
    if settings.script:
        if settings.scaling == "weak":
            flags += ["--per-rank-batch"]
        config = _config_file()
        if config is not None:
            flags += ["--config", str(config)]
    return flags


def _max_steps(settings: CompareSettings) -> int | None:
    """--steps for a user's script: its Session ends the run after that many optimizer steps."""
    return settings.steps if settings.script else None


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_nproc() -> list[int]:
    """1 and 2 processes on a CPU-only machine; on GPUs, 1 and every visible GPU (just 1 on a one-GPU machine)."""
    gpus = visible_gpus()
    return sorted({1, gpus}) if gpus else [1, 2]


def default_strategies(framework: str | None = None) -> list[str]:
    """Every method in the registry (of ``framework`` when given); those that cannot run here become 'unavailable'
    rows."""
    return [spec for e in registry.entries() if framework is None or e.runs(framework)
            for spec in (e.compare_specs or (str(e.method),))]


def strategies(settings: CompareSettings) -> list[str]:
    """The methods compared: those asked for; by default every method for a bundled workload (it has a Keras twin),
    and for a --script the methods of its framework only — a Keras script is not measured against eight torch rows
    that could never run it, nor a Session script against the TensorFlow ones. A method that splits the model by a
    plan (tp) is a default cell only for a bundled model that has one; a script's model is asked for by name."""
    if settings.strategies:
        return settings.strategies
    workload = _workload(settings)
    splittable = workload is not None and workload.splittable
    return [spec for spec in default_strategies(script_framework(settings.script) if settings.script else None)
            if splittable or not registry.info(spec.partition(":")[0]).splits_model]


def _framework_mismatch(settings: CompareSettings, entry: registry.MethodInfo) -> str | None:
    """Why the method cannot run the compared training, or None when it can."""
    framework = entry.framework
    if settings.script:
        own = script_framework(settings.script)
        if not entry.runs(own):
            kind = "a Keras (paratrain.tf) script" if own == "tensorflow" else "a PyTorch (Session) script"
            return f"{framework} method; {Path(settings.script).name} is {kind}"
        return None
    if framework == "tensorflow" and (settings.workload or "mlp") not in KERAS_WORKLOADS:
        return f"no Keras version of the {settings.workload} workload (only {', '.join(KERAS_WORKLOADS)})"
    return None


def plan_cells(settings: CompareSettings) -> list[Cell]:
    """Every (method, world size) to run, plus one 'unavailable' row per method that cannot run here."""
    names = strategies(settings)
    script, args = _script_args(settings)  # the same training for every cell
    torch_flags, gpus = _run_flags(settings), visible_gpus()  # the same for every method: read once
    budget, workload = budget_.resolve(settings.memory_per_rank, gpus), _workload(settings)
    cells: list[Cell] = []
    for spec in names:
        name, _ = registry.parse_spec(spec)
        entry = registry.info(name)
        mismatch = _framework_mismatch(settings, entry)
        if mismatch:
            cells.append(Cell(None, spec, settings.nproc[0], mismatch))
            continue
        if not entry.implemented:
            cells.append(Cell(None, spec, settings.nproc[0], "not implemented in this version"))
            continue
        cls, options = registry.resolve(spec)
        avail = cls.available()
        normalized = format_spec(cls.method, options)
        if not avail.ok:
            fix = f" (fix: {avail.fix})" if avail.fix else ""
            cells.append(Cell(None, spec, settings.nproc[0], avail.reason + fix, normalized))
            continue
        # mirrored's --nproc is its replica count; the other one-process methods run once
        sizes = [1] if not entry.multi_process and entry.framework == "torch" else settings.nproc
        framework = script_framework(settings.script) if settings.script else entry.framework
        run_script = KERAS_SCRIPT if framework == "tensorflow" and not settings.script else script
        flags = torch_flags if framework == "torch" else []
        for n in sizes:
            if gpus and n > gpus:  # one process (or replica) per GPU: a launch would refuse it
                cells.append(Cell(None, spec, n, f"needs {n} GPUs, {gpus} visible", normalized))
                continue
            predicted, misfit = budget_.size_cell(normalized, n, settings, workload, budget, framework)
            if misfit:
                cells.append(Cell(None, spec, n, misfit, normalized, predicted=predicted, status="does_not_fit"))
                continue
            cells.append(Cell(CellSpec(normalized, n, run_script, args, flags, _max_steps(settings)), spec, n,
                              normalized=normalized, framework=framework, predicted=predicted))
    if not any(c.spec for c in cells):
        budget_.refuse_if_none_fit([(c.key, c.reason) for c in cells if c.status == "does_not_fit"], budget)
        raise ConfigError("none of the requested methods can run here", hint="see `paratrain doctor`")
    return cells


def environment() -> dict[str, Any]:
    import torch

    from paratrain.devices.inventory import collect

    return {"python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
            "hostname": socket.gethostname(), "inventory": collect().to_json(), "cores": available_cores()}


def run_compare(settings: CompareSettings, out_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """Run every cell and return the results dict (see docs/results-schema.md)."""
    cells = plan_cells(settings)
    say = progress or (lambda key, text, done: None)
    workload = _workload(settings)
    budget = budget_.resolve(settings.memory_per_rank, visible_gpus())
    tokens = workload.tokens_per_sample if workload else None
    total = settings.steps or (workload.steps if workload else None)
    now = datetime.datetime.now(datetime.timezone.utc)
    results: dict[str, Any] = {
        # Unique per run, whatever --out is, so a re-used output folder never replaces an older history row.
        "id": f"compare-{workload.slug if workload else 'script'}-{now:%Y%m%d-%H%M%S}",
        "created": now.isoformat(timespec="seconds"),
        "paratrain": __version__,
        "settings": _settings_dict(settings, workload),
        "memory_budget": budget.to_json() if budget else None,
        "env": environment(),
        "cells": [],
        "interrupted": False,
    }
    for cell in cells:
        say(cell.key, "queued" if cell.spec else cell.reason if cell.status == "does_not_fit"
            else f"not available: {cell.reason}", None)
    measured: dict[str, tuple[Cell, list[dict[str, Any]]]] = {}
    try:
        for cell in cells:
            if cell.spec is None:
                results["cells"].append(_unavailable(cell))
                continue
            runs = [_run(cell, settings, out_dir, i, say, tokens, total) for i in range(settings.repeat)]
            measured[cell.key] = (cell, runs)
            results["cells"].append(_row(cell, runs, budget))
            say(cell.key, results["cells"][-1]["status"], results["cells"][-1])
        _measure_suspects_again(results, measured, settings, out_dir, say, tokens, total, budget)
        finalize(results)
        _measure_floors(results, cells, settings, out_dir, say)
    except KeyboardInterrupt:
        results["interrupted"] = True
    finalize(results)
    return results


def _run(cell: Cell, settings: CompareSettings, out_dir: Path, i: int, say: Progress, tokens: int | None,
         total: int | None) -> dict[str, Any]:
    """One run of a cell (the i-th, from 0), with its progress shown."""
    assert cell.spec is not None
    runs = settings.repeat + (i >= settings.repeat)  # a run past --repeat measures a disturbed cell again

    def tick(step: int) -> None:
        rep = f" (run {i + 1}/{runs})" if runs > 1 else ""
        say(cell.key, f"running step {step}/{total or '?'}{rep}", None)

    tick(0)
    return run_cell(cell.spec, out_dir / "cells" / _slug(cell.key) / f"run{i + 1}", warmup=settings.warmup,
                    timeout=settings.timeout, tokens_per_sample=tokens, progress=tick,
                    profile_steps=_profile_steps(settings, total))


def _row(cell: Cell, runs: list[dict[str, Any]], budget: budget_.Budget | None, typical: float | None = None,
         cores: int | None = None, suspect: dict[str, Any] | None = None) -> dict[str, Any]:
    row = {"key": cell.key, "strategy": cell.strategy, "spec": cell.normalized, "nproc": cell.nproc,
           "framework": _framework(cell), "predicted_mem": cell.predicted,
           **disturbance.median_run(runs, typical, cores, suspect)}
    row["over_budget"] = budget_.over(row, budget)
    return row


def _measure_suspects_again(results: dict[str, Any], measured: dict[str, tuple[Cell, list[dict[str, Any]]]],
                            settings: CompareSettings, out_dir: Path, say: Progress, tokens: int | None,
                            total: int | None, budget: budget_.Budget | None) -> None:
    """Run each cell that other work disturbed (or that ran far slower than its one-process peers) once more, now
    that the others are done, and keep its least disturbed run (bench/disturbance.py)."""
    cores = results["env"]["cores"]
    again = disturbance.suspects(results["cells"], cores)
    for key in again:
        cell, runs = measured[key]
        runs.append(_run(cell, settings, out_dir, len(runs), say, tokens, total))
    typical = disturbance.typical_load([r for _, runs in measured.values() for r in runs])
    for i, row in enumerate(results["cells"]):
        if row["key"] not in measured:
            continue
        cell, runs = measured[row["key"]]  # every row again: with --repeat, one of its runs may be the disturbed one
        results["cells"][i] = _row(cell, runs, budget, typical, cores, runs[0] if row["key"] in again else None)
        if row["key"] in again:
            results["cells"][i]["remeasured"] = disturbance.remeasured(runs[0], results["cells"][i], cores)
            say(row["key"], results["cells"][i]["status"], results["cells"][i])


def _measure_floors(results: dict[str, Any], cells: list[Cell], settings: CompareSettings, out_dir: Path,
                    say: Progress) -> None:
    """Run the noise floors the equivalence verdict needs (none when every cell matched exactly); see
    :mod:`paratrain.bench.equivalence`."""
    floors = equivalence.floors_needed(results)
    ref_key = results.get("reference")
    ref = next((c for c in cells if c.key == ref_key and c.spec is not None), None)
    ref_row = next((c for c in results["cells"] if c["key"] == ref_key), None)
    if not floors or ref is None or ref.spec is None or ref_row is None:
        return
    for floor in floors:
        say(floor.key, "running", None)
        run = run_cell(floor.spec(ref.spec), out_dir / "cells" / f"floor-{floor.name}", warmup=settings.warmup,
                       timeout=settings.timeout)
        results["floors"][floor.name] = equivalence.floor_entry(floor, run, ref_row["losses"])
        say(floor.key, run["status"], run)


def _profile_steps(settings: CompareSettings, total: int | None) -> int:
    """Steps profiled for the time breakdown, after warm-up and left out of the throughput; none when the run is
    too short to keep at least as many timed steps."""
    if total is not None and total - max(settings.warmup, 1) < 2 * PROFILE_STEPS:
        return 0
    return PROFILE_STEPS


def _framework(cell: Cell) -> str:
    return cell.framework or registry.info(registry.parse_spec(cell.strategy)[0]).framework


def _unavailable(cell: Cell) -> dict[str, Any]:
    return {"key": cell.key, "strategy": cell.strategy, "spec": cell.normalized or cell.strategy,
            "nproc": cell.nproc, "status": cell.status, "error": cell.reason, "log": None,
            "framework": _framework(cell), "predicted_mem": cell.predicted}


def _slug(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=" else "_" for c in key)


def _settings_dict(settings: CompareSettings, workload: Workload | None) -> dict[str, Any]:
    return {
        "workload": workload.name if workload else None,
        "script": settings.script, "script_args": settings.script_args,
        "strategies": strategies(settings), "nproc": settings.nproc,
        "steps": settings.steps or (workload.steps if workload else None),
        "warmup": settings.warmup, "repeat": settings.repeat, "scaling": settings.scaling,
        "global_batch": workload.global_batch if workload else None,
        "tokens_per_sample": workload.tokens_per_sample if workload else None,
        "width": settings.width, "depth": settings.depth, "precision": settings.precision or "fp32",
        "activation_checkpointing": settings.activation_checkpointing,
        "memory_per_rank": settings.memory_per_rank,
    }


__all__ = ["EQUIVALENCE_TOL", "CompareSettings", "finalize", "plan_cells", "run_compare"]
