"""The launch environment, read once.

Launchers speak to workers only through environment variables: torchrun's ``RANK``/``WORLD_SIZE``/... and
paratrain's own ``PARATRAIN_*`` (method name, its options, timeout). Reading them in one place into a frozen object
keeps the rest of the code free of ``os.environ`` look-ups.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

PREFIX = "PARATRAIN_"
STRATEGY_VAR = "PARATRAIN_STRATEGY"
TIMEOUT_VAR = "PARATRAIN_TIMEOUT"
LOCAL_RANK_ARG_VAR = "PARATRAIN_LOCAL_RANK_ARG"  # "1": the worker appends --local_rank=N (the deepspeed launcher's way)
DEEPSPEED_WATCH_VAR = "PARATRAIN_DEEPSPEED_WATCH"  # "1": note what a script's own deepspeed.initialize ran
NPROC_VAR = "PARATRAIN_NPROC"
TF_CONFIG_VAR = "PARATRAIN_TF_CONFIG_JSON"  # multiworker: every worker's host:port; each worker gets its TF_CONFIG
FAILURES_VAR = "PARATRAIN_FAILURES"  # folder of the workers' notes for the launcher (failures, progress, done)
CHECKPOINT_DIR_VAR = "PARATRAIN_CHECKPOINT_DIR"
CHECKPOINT_EVERY_VAR = "PARATRAIN_CHECKPOINT_EVERY"
KEEP_VAR = "PARATRAIN_KEEP"
QUIET_TF_VAR = "PARATRAIN_QUIET_TF"  # "1": a quiet TensorFlow launch; workers hide TF's start-up lines (tf_import)
# Variables that are paratrain's own settings rather than method options.
RESERVED = {
    STRATEGY_VAR, TIMEOUT_VAR, NPROC_VAR, FAILURES_VAR, "PARATRAIN_HOME", "PARATRAIN_DEBUG", "PARATRAIN_METRICS",
    CHECKPOINT_DIR_VAR, CHECKPOINT_EVERY_VAR, KEEP_VAR, TF_CONFIG_VAR, QUIET_TF_VAR, DEEPSPEED_WATCH_VAR,
    LOCAL_RANK_ARG_VAR,
    "PARATRAIN_TRAIN",  # paratrain.options.TRAIN_VAR
    "PARATRAIN_MAX_STEPS", "PARATRAIN_PROFILE",  # paratrain.metrics: compare's measuring settings
}


def option_var(name: str) -> str:
    """The environment variable that carries one method option (``zero_stage`` -> ``PARATRAIN_ZERO_STAGE``)."""
    return PREFIX + name.upper()


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    launched: bool = False  # started by torchrun (or compatible): RANK and WORLD_SIZE are set
    strategy: str | None = None  # method name from PARATRAIN_STRATEGY (may carry a ":opts" spec)
    options: Mapping[str, str] = field(default_factory=dict)  # raw PARATRAIN_<OPTION> values, lower-cased keys
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
        options = {
            key[len(PREFIX):].lower(): value
            for key, value in env.items()
            if key.startswith(PREFIX) and key not in RESERVED
        }
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
            options=options,
            timeout_s=float(timeout) if timeout else None,
            master=master,
            checkpoint_dir=env.get(CHECKPOINT_DIR_VAR) or None,
            checkpoint_every=int(env[CHECKPOINT_EVERY_VAR]) if env.get(CHECKPOINT_EVERY_VAR) else None,
            keep=int(env[KEEP_VAR]) if env.get(KEEP_VAR) else None,
        )
