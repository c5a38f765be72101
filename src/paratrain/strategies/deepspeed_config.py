"""The DeepSpeed config paratrain gives ``deepspeed.initialize``: built from the method's options and the training
options, with the user's own DeepSpeed JSON merged in and validated before any process starts.

Why paratrain writes it: the same training must mean the same thing under every method. DeepSpeed's own defaults
would change it silently — it clips gradients at norm 1.0 unless told otherwise — and its batch keys would disagree
with the loader's (in paratrain the loader's batch size is the global batch). So paratrain owns the keys that say
*what* is trained (batch, accumulation, clipping, precision, ZeRO stage, offload); the user's JSON may tune *how*
(bucket sizes, overlap, communication dtype, …). A user key that disagrees with one paratrain owns is an error
naming both, never a silent winner; an unknown key or a value DeepSpeed rejects is a one-line error naming the key.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from paratrain.errors import ConfigError, did_you_mean
from paratrain.strategies.costs import ZERO_REDUCE_BUCKET

# key → the paratrain setting that owns it
OWNED = {"train_batch_size": "the loader's batch_size (the global batch)",
         "train_micro_batch_size_per_gpu": "the loader's batch_size (the global batch)",
         "gradient_accumulation_steps": "--grad-accum", "gradient_clipping": "--grad-clip",
         "bf16": "--precision", "fp16": "--precision", "torch_autocast": "--precision"}
# DeepSpeed's precision sections. bf16-mixed under ZeRO 1-3 is its bf16 mode (bf16 parameters gathered and computed
# with, fp32 master weights and optimizer state in the partitions, gradients reduced in fp32), inside torch.autocast
# for the tensors the mode does not cast (fp32 buffers; _autocast says why not DeepSpeed's own); ZeRO-0, fp16-mixed
# and mixed=autocast run torch_autocast over fp32 weights, as the replicated methods do. A user's "bf16"/"fp16"
# section enabled for the same precision as --precision agrees with it.
PRECISION_KEYS = ("bf16", "fp16", "torch_autocast")
AUTOCAST_DTYPE = {"bf16-mixed": "bfloat16", "fp16-mixed": "float16"}
OWNED_ZERO = {"stage": "deepspeed:zero_stage=N", "offload_optimizer": "deepspeed:offload=optimizer",
              "offload_param": "deepspeed:offload=all"}
NEVER_PRINT = 2**31 - 1  # steps_per_print: DeepSpeed's own per-step log lines stay out of the user's output


def read_user_config(path: str) -> dict[str, Any]:
    """The user's DeepSpeed JSON, checked for keys DeepSpeed does not know (and that paratrain owns)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"DeepSpeed config {path} does not exist", hint="give the path of a DeepSpeed JSON file")
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"DeepSpeed config {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"DeepSpeed config {path} must be a JSON object")
    return data


def bf16_weights(zero_stage: int, precision: str, mixed: str = "params") -> bool:
    """Whether the engine holds bf16 parameters (its bf16 mode): bf16-mixed with ZeRO partitioning, unless asked for
    autocast over fp32 weights."""
    return precision == "bf16-mixed" and zero_stage >= 1 and mixed == "params"


def build(zero_stage: int, offload: str, user: dict[str, Any], train: Any, mixed: str = "params") -> dict[str, Any]:
    """The final config: the user's keys, then paratrain's (which must agree with any the user also set)."""
    zero: dict[str, Any] = {"stage": zero_stage}
    if offload in ("optimizer", "all"):
        zero["offload_optimizer"] = {"device": "cpu"}
    if offload == "all":
        zero["offload_param"] = {"device": "cpu"}
    ours: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 1,  # DeepSpeed's own loader is not used: the Session's loader batches
        "gradient_accumulation_steps": train.grad_accum,
        "gradient_clipping": float(train.grad_clip or 0.0),  # 0: never clip, as under every other method
        "bf16": {"enabled": bf16_weights(zero_stage, train.precision, mixed)},
        "fp16": {"enabled": False},
        "torch_autocast": _autocast(train.precision, user.get("torch_autocast"),
                                    bf16_weights(zero_stage, train.precision, mixed)),
    }
    _check_owned(user, ours, zero, train.precision)
    # gradients reduced in fp32 unless the user's JSON tunes it (a communication choice, theirs to make)
    ours_how = {"communication_data_type": "fp32"} if ours["bf16"]["enabled"] else {}
    merged = {"steps_per_print": NEVER_PRINT, "wall_clock_breakdown": False, **ours_how,
              # paratrain passes the user's torch optimizer; ZeRO wraps it (SGD and others included)
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
              **{k: v for k, v in user.items() if k not in ours}, **ours}
    merged["zero_optimization"] = {**(user.get("zero_optimization") or {}), **zero}
    return merged


def _autocast(precision: str, theirs: Any, bf16_mode: bool = False) -> dict[str, Any]:
    """The torch_autocast section: on for the mixed precisions. Gradients are reduced in fp32, as under every other
    method (DeepSpeed's default reduces Linear/Conv gradients in the autocast dtype), unless the user's JSON names
    its ``lower_precision_safe_modules`` — a communication choice, which is theirs.

    Off in the bf16 mode (``bf16_mode``) unless the user names those modules. Why: with torch_autocast on, ZeRO
    reduces each gradient in its parameter's communication dtype, the parameter's own dtype by default — bf16 in the
    bf16 mode — and ignores ``communication_data_type``; it gathers ZeRO-3's parameters in that dtype too, so the two
    cannot be told apart per parameter. paratrain runs ``torch.autocast`` inside the engine instead (around the
    model's own forward: DeepSpeedStrategy.wrap), for the tensors the bf16 mode does not cast."""
    if precision not in AUTOCAST_DTYPE:
        return {"enabled": False}
    safe = theirs.get("lower_precision_safe_modules", []) if isinstance(theirs, dict) else []
    if bf16_mode and not safe:
        return {"enabled": False}
    return {"enabled": True, "dtype": AUTOCAST_DTYPE[precision], "lower_precision_safe_modules": safe}


_DTYPE_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                "half": "float16"}


def _precision_agrees(key: str, theirs: Any, precision: str) -> bool:
    """A user's precision section agrees with --precision when it is on exactly for that precision (a
    ``torch_autocast`` section with that dtype too); its other keys are then DeepSpeed tuning."""
    if not isinstance(theirs, dict):
        return False
    enabled = bool(theirs.get("enabled", False))
    if key == "bf16":  # on for bf16-mixed (its weights mode, or autocast where paratrain runs that)
        return enabled == (precision == "bf16-mixed")
    if key != "torch_autocast":
        return enabled == (precision == f"{key}-mixed")
    wanted = AUTOCAST_DTYPE.get(precision)
    return enabled == (wanted is not None) and (
        not enabled or _DTYPE_NAMES.get(str(theirs.get("dtype", wanted))) == wanted)


def _check_owned(user: dict[str, Any], ours: dict[str, Any], zero: dict[str, Any], precision: str) -> None:
    for key, owner in OWNED.items():
        if key not in user or user[key] == ours[key]:
            continue
        if key in PRECISION_KEYS:
            if not _precision_agrees(key, user[key], precision):
                raise ConfigError(f'the DeepSpeed config sets "{key}": {json.dumps(user[key])}, which disagrees '
                                  f"with --precision {precision}",
                                  hint=f'remove "{key}" from the DeepSpeed JSON: --precision decides')
            continue
        raise ConfigError(f'the DeepSpeed config sets "{key}": {json.dumps(user[key])}, which paratrain sets '
                          f"from {owner} ({json.dumps(ours[key])})",
                          hint=f'remove "{key}" from the DeepSpeed JSON and use {owner}')
    for key, owner in OWNED_ZERO.items():
        given = (user.get("zero_optimization") or {}).get(key)
        if given is not None and given != zero.get(key):
            raise ConfigError(f'the DeepSpeed config sets "zero_optimization.{key}": {json.dumps(given)}, which '
                              f"paratrain sets from the method spec ({owner})",
                              hint=f'remove it from the JSON and write --strategy {owner}')


def size_buckets(config: dict[str, Any], params: int) -> dict[str, Any]:
    """The config with ZeRO's gradient-reduction bucket no larger than the model, unless the user's JSON sizes it.

    Why: ZeRO allocates that bucket whole on every backward (``torch.empty(reduce_bucket_size)``), and its default
    of 5e8 elements is 1.9 GiB in fp32 whatever the model — measured as the peak of a 3 M parameter llama under
    zero3 on CPU. A bucket as large as the model holds every gradient already, so the reductions, and the numbers,
    are the same; only the memory no tensor would ever fill is not taken. Models above 5e8 parameters keep
    DeepSpeed's default."""
    zero = dict(config.get("zero_optimization") or {})
    if "reduce_bucket_size" in zero:
        return config
    zero["reduce_bucket_size"] = max(1, min(ZERO_REDUCE_BUCKET, params))
    return {**config, "zero_optimization": zero}


class _Recording(dict):
    """A dict that remembers which keys DeepSpeed looked up: a top-level key it never reads is one it does not
    know (DeepSpeed itself ignores those silently, so a typo would change nothing and say nothing)."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)


def validate(config: dict[str, Any]) -> None:
    """Run DeepSpeed's own config parser over the final config, without starting anything: a value it rejects or a
    key it does not know is one line naming the key."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu" if not _has_cuda() else "cuda")
    from deepspeed.runtime.config import DeepSpeedConfig

    recorded = _Recording(config)
    try:
        DeepSpeedConfig(recorded)
    except Exception as exc:  # pydantic's ValidationError, DeepSpeed's AssertionError/ValueError
        raise ConfigError(f"DeepSpeed rejects the config: {_first_error(exc)}",
                          hint="fix that key in the DeepSpeed JSON (--strategy deepspeed:config=PATH)") from None
    unknown = sorted(k for k in config if k not in recorded.read)
    if unknown:
        known = sorted(k for k in recorded.read if isinstance(k, str))
        raise ConfigError(f'DeepSpeed does not know the config key "{unknown[0]}".{did_you_mean(unknown[0], known)}',
                          hint="remove it or fix its name in the DeepSpeed JSON")


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        model = getattr(exc, "title", "")
        section = {"DeepSpeedZeroConfig": "zero_optimization.", "DeepSpeedBF16Config": "bf16.",
                   "DeepSpeedFP16Config": "fp16."}.get(model, "")
        return f'"{section}{where}": {first.get("msg")} (got {json.dumps(first.get("input"), default=str)})'
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
