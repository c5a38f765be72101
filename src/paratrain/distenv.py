"""The launch environment: every ``PARATRAIN_*`` variable declared here, and read once.

Launchers speak to workers only through environment variables: torchrun's ``RANK``/``WORLD_SIZE``/... and
paratrain's own ``PARATRAIN_*``. Every one of paratrain's is declared in this module (``ALL_VARS``, checked by the
test suite against the source), so nothing reads a variable another module invented, and a variable left in a
user's shell is never taken for a setting by the prefix alone. The method's options travel as one JSON value
(``PARATRAIN_METHOD_OPTIONS``): two methods' options of the same name (fsdp's and deepspeed's ``offload``) can no
longer meet in one variable.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from paratrain.errors import ConfigError

# What the launcher hands every worker.
STRATEGY_VAR = "PARATRAIN_STRATEGY"  # the method's name
METHOD_OPTIONS_VAR = "PARATRAIN_METHOD_OPTIONS"  # JSON object: the method's options as strings ({"shard": "grad_op"})
TRAIN_VAR = "PARATRAIN_TRAIN"  # JSON object: the training options the launcher was given (paratrain.options)
TIMEOUT_VAR = "PARATRAIN_TIMEOUT"  # seconds a collective may wait
NPROC_VAR = "PARATRAIN_NPROC"  # processes (or TensorFlow replicas) asked for on this node
FAILURES_VAR = "PARATRAIN_FAILURES"  # folder of the workers' notes for the launcher (failures, progress, done)
CHECKPOINT_DIR_VAR = "PARATRAIN_CHECKPOINT_DIR"
CHECKPOINT_EVERY_VAR = "PARATRAIN_CHECKPOINT_EVERY"
KEEP_VAR = "PARATRAIN_KEEP"
LOCAL_RANK_ARG_VAR = "PARATRAIN_LOCAL_RANK_ARG"  # "1": the worker appends --local_rank=N (the deepspeed launcher's way)
DEEPSPEED_WATCH_VAR = "PARATRAIN_DEEPSPEED_WATCH"  # "1": note what a script's own deepspeed.initialize ran
TF_CONFIG_VAR = "PARATRAIN_TF_CONFIG_JSON"  # multiworker: every worker's host:port; each worker gets its TF_CONFIG
QUIET_TF_VAR = "PARATRAIN_QUIET_TF"  # "1": a quiet TensorFlow launch; workers hide TF's start-up lines (tf_import)
# What `paratrain compare` adds to measure a cell (paratrain.metrics, paratrain.run_hooks).
METRICS_VAR = "PARATRAIN_METRICS"  # folder: each rank appends its measurements there
PROFILE_VAR = "PARATRAIN_PROFILE"  # "START,COUNT": profile the COUNT steps after step START
MAX_STEPS_VAR = "PARATRAIN_MAX_STEPS"  # compare --steps for a user's script: the Session ends the run there
RESEED_VAR = "PARATRAIN_RESEED"  # compare's seed floor (paratrain.run_hooks)
ACCUM_SPLIT_VAR = "PARATRAIN_ACCUM_SPLIT"  # compare's float-order floor (paratrain.run_hooks)
# The user's own settings.
HOME_VAR = "PARATRAIN_HOME"  # where the history database lives (default ~/.paratrain)
DEBUG_VAR = "PARATRAIN_DEBUG"  # "1": full tracebacks, in the launcher and in every worker
CACHE_DIR_VAR = "PARATRAIN_CACHE_DIR"  # built wheels (Horovod's); default $XDG_CACHE_HOME/paratrain
HOROVOD_SDIST_VAR = "PARATRAIN_HOROVOD_SDIST"  # a local Horovod sdist to build from (offline machines)
PLUGINS_VAR = "PARATRAIN_PLUGINS"  # modules to import that register methods (strategies/registry.py)

ALL_VARS = frozenset({
    STRATEGY_VAR, METHOD_OPTIONS_VAR, TRAIN_VAR, TIMEOUT_VAR, NPROC_VAR, FAILURES_VAR, CHECKPOINT_DIR_VAR,
    CHECKPOINT_EVERY_VAR, KEEP_VAR, LOCAL_RANK_ARG_VAR, DEEPSPEED_WATCH_VAR, TF_CONFIG_VAR, QUIET_TF_VAR,
    METRICS_VAR, PROFILE_VAR, MAX_STEPS_VAR, RESEED_VAR, ACCUM_SPLIT_VAR,
    HOME_VAR, DEBUG_VAR, CACHE_DIR_VAR, HOROVOD_SDIST_VAR, PLUGINS_VAR,
})


def debug() -> bool:
    return os.environ.get(DEBUG_VAR) == "1"


def method_options_env(options: Mapping[str, str]) -> dict[str, str]:
    """The variable that carries a method's options to its workers (none when there are none)."""
    return {METHOD_OPTIONS_VAR: json.dumps(dict(options), sort_keys=True)} if options else {}


def _method_options(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ConfigError(f"{METHOD_OPTIONS_VAR} must be a JSON object of option names to values, got {text[:80]!r}",
                          hint=f"unset {METHOD_OPTIONS_VAR}; give options in the spec: --strategy fsdp:shard=full")
    return {str(k): str(v) for k, v in value.items()}


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    launched: bool = False  # started by torchrun (or compatible): RANK and WORLD_SIZE are set
    strategy: str | None = None  # method name from PARATRAIN_STRATEGY (may carry a ":opts" spec)
    options: Mapping[str, str] = field(default_factory=dict)  # the method's options from PARATRAIN_METHOD_OPTIONS
    timeout_s: float | None = None
    master: str | None = None
    checkpoint_dir: str | None = None  # --checkpoint-dir: periodic checkpoints + resume after a restart
    checkpoint_every: int | None = None
    keep: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> DistEnv:
        env = os.environ if environ is None else environ
        launched = "RANK" in env and "WORLD_SIZE" in env
        world = int(env.get("WORLD_SIZE", "1"))
        timeout = env.get(TIMEOUT_VAR)
        master = None
        if "MASTER_ADDR" in env:
            master = f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}"
        return cls(
            rank=int(env.get("RANK", "0")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            world_size=world,
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", str(world))),
            launched=launched,
            strategy=env.get(STRATEGY_VAR) or None,
            options=_method_options(env.get(METHOD_OPTIONS_VAR)),
            timeout_s=float(timeout) if timeout else None,
            master=master,
            checkpoint_dir=env.get(CHECKPOINT_DIR_VAR) or None,
            checkpoint_every=int(env[CHECKPOINT_EVERY_VAR]) if env.get(CHECKPOINT_EVERY_VAR) else None,
            keep=int(env[KEEP_VAR]) if env.get(KEEP_VAR) else None,
        )
