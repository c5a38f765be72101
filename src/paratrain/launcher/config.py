"""Launch options from flags and an optional ``paratrain.toml`` (flags win)."""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paratrain import options as train_options
from paratrain.errors import ConfigError, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_CONFIG = "paratrain.toml"


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    strategy: str = "ddp"
    nproc: int | None = None  # per node; None = one per visible GPU, or 2 on a CPU-only machine
    nnodes: int = 1
    node_rank: int = 0
    master: str | None = None  # HOST:PORT of node 0; None = local rendezvous on a free port
    max_restarts: int = 0
    timeout: float | None = None  # seconds for every collective
    checkpoint_dir: str | None = None  # periodic checkpoints of a Session script, resumed after a restart
    checkpoint_every: int | None = None  # optimizer steps between them
    keep: int | None = None  # newest checkpoints kept (default 2)
    rendezvous_timeout: int | None = None  # seconds a node waits for the others to join (torchrun: 600/900)
    stall_timeout: float | None = None  # seconds a rank may wait in a collective before the watchdog stops the job
    threads: int | None = None  # CPU threads per process; None = launch/threads.py's policy
    # Training options (paratrain.options.TrainOptions) given here — flags or file — for the script's Session; the
    # file's keys and the flags are made from TrainOptions' fields, so none is written again in this class.
    train: dict[str, Any] = field(default_factory=dict)
    verbose: bool = False
    script: str = ""
    args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.nproc is not None and self.nproc < 1:
            raise ConfigError(f"--nproc {self.nproc} must be 1 or more")
        if self.nnodes < 1:
            raise ConfigError(f"--nnodes {self.nnodes} must be 1 or more")
        if not 0 <= self.node_rank < self.nnodes:
            raise ConfigError(f"--node-rank {self.node_rank} must be between 0 and {self.nnodes - 1}")
        if self.max_restarts < 0:
            raise ConfigError(f"--max-restarts {self.max_restarts} must be 0 or more")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(f"--timeout {self.timeout} must be a positive number of seconds")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ConfigError(f"--checkpoint-every {self.checkpoint_every} must be 1 or more")
        if self.keep is not None and self.keep < 1:
            raise ConfigError(f"--keep {self.keep} must be 1 or more")
        if (self.checkpoint_dir is None) != (self.checkpoint_every is None):
            raise ConfigError("--checkpoint-dir and --checkpoint-every go together",
                              hint="e.g. --checkpoint-dir ckpt --checkpoint-every 100")
        if self.checkpoint_dir is not None and Path(self.checkpoint_dir).exists() \
                and not Path(self.checkpoint_dir).is_dir():
            raise ConfigError(f"--checkpoint-dir {self.checkpoint_dir} is a file", hint="give a directory")
        if self.rendezvous_timeout is not None and self.rendezvous_timeout < 1:
            raise ConfigError(f"--rendezvous-timeout {self.rendezvous_timeout} must be 1 second or more")
        if self.stall_timeout is not None and self.stall_timeout <= 0:
            raise ConfigError(f"--stall-timeout {self.stall_timeout} must be a positive number of seconds")
        if self.threads is not None and self.threads < 1:
            raise ConfigError(f"--threads {self.threads} must be 1 or more")
        if self.nnodes > 1 and not self.master:
            raise ConfigError(f"--nnodes {self.nnodes} needs --master HOST:PORT (the address of node 0)",
                              hint="e.g. --master 10.0.0.1:29500 on every node")
        train_options.given(self.train)
        if self.master is not None:
            host, sep, port = self.master.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(f'--master "{self.master}" is not HOST:PORT', hint="e.g. --master node0:29500")

    def as_dict(self) -> dict[str, Any]:
        """Every option flat, as the file spells them (training options None where not given)."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k != "train"}
        return {**values, **self.train_options()}

    def train_options(self) -> dict[str, Any]:
        """The training options given to the launcher (flags or file), for the workers' Session."""
        return {name: self.train.get(name) for name in train_options.FIELDS}


FILE_KEYS = {f.name for f in dataclasses.fields(RunConfig)} - {"script", "args", "train"} | set(train_options.FIELDS)
# What a TOML value of each type is called in an error (bool before int: True is an int to Python, not to TOML).
TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _allowed_types(key: str) -> tuple[type, ...]:
    """The Python types RunConfig accepts for ``key``, from its annotation (``int | None`` → ``(int,)``)."""
    return train_options.value_types(key, train_options.TrainOptions if key in train_options.FIELDS else RunConfig)


def _is_a(value: Any, kind: type) -> bool:
    """TOML's types, not Python's: a bool is not an integer, and an integer is a number (``timeout = 120``)."""
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _toml_text(value: Any) -> str:
    """The value as it was written in the file (near enough): ``"two"``, ``true``, ``[1, 2]``."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:
        return str(value)


def check_types(file: Path, values: dict[str, Any]) -> None:
    """A value of the wrong type is named here, with its key and the type expected, instead of surfacing later as
    a comparison between a string and an integer deep inside the launcher."""
    for key, value in values.items():
        allowed = _allowed_types(key)
        if any(_is_a(value, kind) for kind in allowed):
            continue
        expected = " or ".join(TYPE_WORDS.get(kind, kind.__name__) for kind in allowed)
        quoted = isinstance(value, str) and not any(kind is str for kind in allowed)
        raise ConfigError(f"{file}: {key} = {_toml_text(value)} must be {expected}",
                          hint="write numbers and true/false without quotes" if quoted else None)


def script_path(script: str, hint: str) -> Path:
    """The training script as a path, or the one-line reason it cannot be one: missing, or a folder (a folder
    "does not exist" would send the user looking for a typo in a path that is there)."""
    path = Path(script)
    if path.is_dir():
        found = sorted(str(p) for p in path.glob("*.py"))
        listed = f"{', '.join(found[:3])}{', …' if len(found) > 3 else ''}"
        raise ConfigError(f"script {script} is a directory, not a script",
                          hint=f"give the Python file in it that trains ({listed})" if found else hint)
    if not path.is_file():
        raise ConfigError(f"script {script} does not exist", hint=hint)
    return path


def script_framework(script: str | Path) -> str:
    """"tensorflow" for a Keras / paratrain.tf script, else "torch": which methods can run it (read, not imported)."""
    try:
        text = Path(script).read_text(errors="replace")
    except OSError:
        return "torch"
    markers = ("paratrain.tf", "from paratrain import tf", "import tensorflow", "from tensorflow", "import keras")
    return "tensorflow" if any(m in text for m in markers) else "torch"


def load_config(path: str | None) -> dict[str, Any]:
    """Read launch options from a TOML file (top level, or a ``[run]`` table). Missing default file = {}."""
    file = Path(path) if path else Path(DEFAULT_CONFIG)
    if not file.exists():
        if path:
            raise ConfigError(f"config file {file} does not exist", hint="check the path given to --config")
        return {}
    try:
        data = tomllib.loads(file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    data = data.get("run", data)
    values = {k.replace("-", "_"): v for k, v in data.items()}
    for key in values:
        if key not in FILE_KEYS:
            raise ConfigError(f'{file}: unknown key "{key}".{did_you_mean(key, FILE_KEYS)}',
                              hint=f"allowed: {', '.join(sorted(FILE_KEYS))}")
    check_types(file, values)
    return values


def merge(file_values: dict[str, Any], flags: dict[str, Any]) -> RunConfig:
    """Flags that were given (not None) override the file; the file overrides the defaults."""
    values = dict(file_values)
    values.update({k: v for k, v in flags.items() if v is not None})
    train = {k: values.pop(k) for k in train_options.FIELDS if k in values}
    try:
        return RunConfig(**values, train=train)
    except TypeError as exc:
        raise ConfigError(f"bad launch option: {exc}") from None
