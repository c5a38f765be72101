"""DeepSpeed ZeRO (stages 0–3, optional CPU offload) behind the Session.

``prepare`` hands the user's model and torch optimizer to ``deepspeed.initialize`` (the optimizer as DeepSpeed's
"client optimizer", which ZeRO partitions); ``backward``/``step`` are the engine's. Launched through torchrun like
ddp and fsdp: the process group is torch's (gloo on CPU through DeepSpeed's CPU accelerator, nccl on GPUs), which
DeepSpeed adopts. Checkpoints are paratrain's, keyed by parameter name with full tensors gathered from the ZeRO
partitions (DeepSpeed's ``safe_get_full_*`` API), so a ZeRO-3 run on 2 ranks resumes on 1 rank, under ddp or in one
process — DeepSpeed's own checkpoints refuse another world size.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch

from paratrain import distenv
from paratrain.console import notice
from paratrain.errors import ConfigError
from paratrain.probes import Component, dist_version, probe
from paratrain.strategies import _procgroup
from paratrain.strategies import deepspeed_config as ds_config
from paratrain.strategies.base import (
    Availability,
    BackwardSyncControl,
    Method,
    RanAs,
    Strategy,
    StrategyOptions,
    expand_shorthands,
    parse_spec,
)


@dataclass(frozen=True, kw_only=True)
class DeepSpeedOptions(StrategyOptions):
    zero_stage: int = 2
    offload: Literal["none", "optimizer", "all"] = "none"
    config: str | None = None  # the user's DeepSpeed JSON, merged in (see deepspeed_config)
    # bf16-mixed under ZeRO 1-3: bf16 parameters (DeepSpeed's bf16 mode, the default) or autocast over fp32 weights
    mixed: Literal["params", "autocast"] = "params"

    shorthands: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        **{f"zero{i}": {"zero_stage": i} for i in range(4)}, "offload": {"offload": "optimizer"}}
    spelled: ClassVar[tuple[str, ...]] = ("zero_stage",)  # the stage is what a reader needs: deepspeed:zero2
    paths: ClassVar[frozenset[str]] = frozenset({"config"})

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise ConfigError(f"deepspeed zero_stage={self.zero_stage} must be 0, 1, 2 or 3",
                              hint="e.g. --strategy deepspeed:zero2")
        if self.offload == "all" and self.zero_stage != 3:
            raise ConfigError("deepspeed offload=all (parameters too) needs ZeRO stage 3",
                              hint="--strategy deepspeed:zero3,offload=all, or offload=optimizer")
        if self.offload != "none" and self.zero_stage == 0:
            raise ConfigError("deepspeed offload needs ZeRO stage 1 or more (stage 0 partitions nothing)",
                              hint="--strategy deepspeed:zero2,offload=optimizer")
        if self.config is not None:  # checked where the options are parsed: in the launcher, before any process
            ds_config.read_user_config(self.config)


# DeepSpeed picks its accelerator at import (DS_ACCELERATOR, else what it detects); on CPU its communication op is
# compiled on first use unless it was built at install (or `make install-all` warmed the cache).
_DEEPSPEED_PROBE = """
import json, os, torch
os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
from deepspeed.accelerator import get_accelerator
from deepspeed.git_version_info import installed_ops
from torch.utils.cpp_extension import _get_build_directory
acc = get_accelerator()
shm = installed_ops.get("deepspeed_shm_comm") or os.path.exists(
    os.path.join(_get_build_directory("deepspeed_shm_comm", verbose=False), "deepspeed_shm_comm.so"))
print(json.dumps({"accelerator": acc.device_name(), "backend": acc.communication_backend_name(),
                  "prebuilt": sorted(k for k, v in installed_ops.items() if v), "shm": bool(shm)}))
"""


class DeepSpeedStrategy(Strategy, BackwardSyncControl):
    method = Method.DEEPSPEED
    builds = "deepspeed"  # an engine from deepspeed.initialize, the Session's or the script's own
    options_type = DeepSpeedOptions
    options: DeepSpeedOptions
    supported_precision = frozenset({"fp32", "bf16-mixed", "fp16-mixed"})
    # The mixed precisions run inside DeepSpeed's torch_autocast (the engine turns off any autocast around its
    # forward, so the Session's cannot be used), with DeepSpeed's own loss scaler under fp16; bf16-mixed under ZeRO
    # 1-3 in its bf16 mode instead (bf16 parameters, fp32 master weights; see deepspeed_config.bf16_weights), with
    # torch.autocast around the model's own forward, inside the engine (deepspeed_config._autocast says why), and
    # LayerNorms handed their input in bf16 (paratrain.precision.match_norm_inputs: an fp32 buffer keeps fp32).
    native_precision = frozenset({"fp32", "bf16-mixed", "fp16-mixed"})
    compilable = False
    clips_gradients = True  # ZeRO owns the gradients: "gradient_clipping" from the grad_clip option

    def __init__(self, options, env) -> None:
        super().__init__(options, env)
        self._engine: Any = None
        self._names: list[list[str]] = []  # parameter names per optimizer group, for checkpoints
        self._before_step: dict | None = None  # storages held just before the first optimizer step

    @classmethod
    def available(cls) -> Availability:
        try:
            found = importlib.util.find_spec("deepspeed") is not None
        except (ImportError, ValueError):  # a broken or hidden installation is as good as none
            found = False
        if not found:
            return Availability(False, "DeepSpeed is not installed", 'pip install "paratrain[deepspeed]"')
        return Availability.yes("DeepSpeed on " + ("GPU (nccl)" if torch.cuda.is_available() else "CPU (gloo)"))

    @classmethod
    def doctor_component(cls, timeout: float) -> Component:
        version = dist_version("deepspeed")
        if not version:
            return Component("DeepSpeed", None, "not installed", 'pip install "paratrain[deepspeed]"')
        info = probe(_DEEPSPEED_PROBE, timeout)
        if "error" in info:
            return Component("DeepSpeed", version, f"error: {info['error']}")
        detail = (f"accelerator: {info['accelerator']} ({info['backend']}); ops built: "
                  f"{', '.join(info['prebuilt']) or 'none (compiled on first use)'}")
        if info["accelerator"] == "cpu":
            detail += f"; CPU comm op {'compiled' if info['shm'] else 'compiles on the first run (~1 min)'}"
        return Component("DeepSpeed", version, detail)

    @classmethod
    def script_env(cls, options, script) -> dict[str, str]:
        """A script written for the ``deepspeed`` launcher (it calls ``deepspeed.initialize`` or
        ``deepspeed.init_distributed`` itself, with no Session) is started as that launcher starts it:
        ``--local_rank=N`` appended to its arguments. Session scripts get nothing appended (their argument parser
        need not know the flag). Every worker notes what a script's own ``deepspeed.initialize`` ran (see
        :mod:`paratrain.launcher.deepspeed_watch`)."""
        from paratrain.distenv import DEEPSPEED_WATCH_VAR, LOCAL_RANK_ARG_VAR

        env = {"DS_ACCELERATOR": "cuda" if torch.cuda.is_available() else "cpu", DEEPSPEED_WATCH_VAR: "1"}
        if _is_native(script):
            env[LOCAL_RANK_ARG_VAR] = "1"
        return env

    @classmethod
    def check_launch(cls, options, train, script=None) -> dict[str, Any]:
        if script is not None and _is_native(script):  # paratrain's config would never reach deepspeed.initialize
            return {"deepspeed_config": NATIVE_CONFIG}
        return {"deepspeed_config": cls.final_config(options, train)}

    @classmethod
    def ran_as(cls, requested: str, notes) -> RanAs | None:
        """A script that passed its own config to ``deepspeed.initialize`` ran what that config says: the job's
        last line reports that stage, and options given in ``--strategy`` that it did not apply are named."""
        from paratrain.launcher import notes as notes_

        facts = notes_.by_rank(notes, "deepspeed")
        if not facts:  # a Session script: paratrain's config ran, as the spec says — if an engine was built at all
            return super().ran_as(requested, notes)
        ran = facts[min(facts)]
        stage, offload = int(ran["zero_stage"]), str(ran.get("offload", "none"))
        what = f"ZeRO stage {stage}" + (f", offload={offload}" if offload != "none" else "")
        ignored = _not_applied(requested, stage, offload)
        note = None
        if ignored:
            note = (f"the script's own config ran {what}; {requested.strip()} was not applied ({', '.join(ignored)}: "
                    "paratrain's DeepSpeed options shape only a Session script's config)")
        return RanAs(f"deepspeed (the script's own config: {what})", note)

    @classmethod
    def final_config(cls, options: DeepSpeedOptions, train: Any) -> dict[str, Any]:
        """The config ``deepspeed.initialize`` gets (``paratrain run --dry-run`` prints it), validated."""
        _check_scaled_clipping(options, train)
        user = ds_config.read_user_config(options.config) if options.config else {}
        config = ds_config.build(options.zero_stage, options.offload, user, train, options.mixed)
        ds_config.validate(config)
        return config

    def setup(self) -> None:
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if torch.cuda.is_available() else "cpu")
        self.device = _procgroup.join(self.env, str(self.method))
        _announce_compile(self.rank)
        import deepspeed

        quiet = not distenv.debug()
        if quiet:  # DeepSpeed's INFO lines, its "untested optimizer" caution (paratrain chose that on purpose)
            logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
            # and torch's deprecation notes for the collectives DeepSpeed calls: not the user's to act on
            warnings.filterwarnings("ignore", message=r".*torch\.distributed\.\w+`? is deprecated",
                                    category=FutureWarning)
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            deepspeed.init_distributed(dist_backend=torch.distributed.get_backend(), verbose=False)

    def init_context(self):
        """ZeRO-3: rank 0 builds the model, the other ranks shapes on the meta device; ``wrap`` partitions it one
        module at a time (``deepspeed_init``). Stages 0–2 hold the whole model on every rank anyway."""
        if self.options.zero_stage != 3:
            return contextlib.nullcontext()
        return self.deferred_shapes()

    def wrap(self, model, optimizer):
        import deepspeed

        from paratrain.model_facts import param_count

        names = {id(p): n for n, p in model.named_parameters()}
        if optimizer is not None:
            self._names = [[names[id(p)] for p in g["params"]] for g in optimizer.param_groups]
        config = self.final_config(self.options, self.train)
        config = ds_config.size_buckets(config, param_count(model))
        if config["bf16"]["enabled"]:
            from paratrain.precision import match_norm_inputs

            match_norm_inputs(model)
            if not config["torch_autocast"]["enabled"]:  # autocast inside the engine (deepspeed_config._autocast)
                from paratrain import precision

                assert self.device is not None  # set by setup()
                precision.apply(model, self.train.precision, self.device, cache=False)
        if self._deferred:
            from paratrain.strategies.deepspeed_init import partition_from_rank0

            partition_from_rank0(model, config)
        from paratrain.launcher import deepspeed_watch

        with deepspeed_watch.session_call():  # paratrain's own config: nothing for the launcher to report
            engine, ds_optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config,
                                                              dist_init_required=False)
        self._engine = engine
        return engine, ds_optimizer

    def backward(self, loss: torch.Tensor) -> None:
        # The Session already weights each micro-batch's loss (its share of the global batch, 1/K under
        # accumulation): DeepSpeed must not divide by its accumulation steps again.
        self._engine.backward(loss, scale_wrt_gas=False)

    def step(self, optimizer) -> None:
        if self._before_step is None:  # once: what the engine holds with the gradients still there
            from paratrain.strategies.deepspeed_state import storages

            self._before_step = storages(self.unwrap(self._engine), optimizer)
        self._engine.step()

    def set_grad_sync(self, model, enabled: bool) -> None:
        # The Session calls step() once per global batch, after the K-th micro-batch: tell the engine which
        # backward ends the accumulation window (reduction and optimizer step happen there).
        model.set_gradient_accumulation_boundary(enabled)

    def grad_norm(self, model) -> float | None:
        norm = model.get_global_grad_norm()
        return None if norm is None else float(norm)

    def unwrap(self, model):
        return getattr(model, "module", model)

    def state_bytes(self, model, optimizer) -> dict[str, int]:
        from paratrain.strategies.deepspeed_state import held_bytes

        return held_bytes(self.unwrap(model), optimizer, self._before_step)

    def state_dict(self, model, optimizer) -> dict[str, Any]:
        from paratrain.strategies import deepspeed_state

        if self.options.zero_stage == 0:
            return super().state_dict(model, optimizer)
        return deepspeed_state.full_state(self.unwrap(model), optimizer, self._names)

    def load_state_dict(self, model, optimizer, state) -> None:
        from paratrain.strategies import deepspeed_state

        if self.options.zero_stage == 0:
            super().load_state_dict(model, optimizer, state)
            return
        deepspeed_state.load_full_state(self.unwrap(model), optimizer, self._names, state)

    def clear_optimizer_state(self, optimizer) -> None:
        from paratrain.strategies import deepspeed_state

        deepspeed_state.clear_state(optimizer)

    def full_model_state_dict(self, model) -> dict[str, torch.Tensor]:
        from paratrain.strategies import deepspeed_state

        if self.options.zero_stage == 0:
            return super().full_model_state_dict(model)
        return deepspeed_state.full_model(self.unwrap(model))

    def teardown(self) -> None:
        self._engine = None
        _procgroup.leave(self.env.timeout_s)


NATIVE_CONFIG = ("the script's own: it passes its config to deepspeed.initialize itself (paratrain's config, and "
                 "the stage, offload and config= of --strategy deepspeed:…, apply only to a paratrain.Session script)")


def _check_scaled_clipping(options: DeepSpeedOptions, train: Any) -> None:
    """fp16-mixed with clipping under ZeRO 1–3 is refused: there DeepSpeed's torch_autocast scales the loss with a
    GradScaler but clips before unscaling, so it clips the loss-scaled gradients (the norm is ~2^16 too large) and
    trains another model, silently. Measured on this Transformer classifier: 6.5e-2 off one process's losses with
    clipping, 2.2e-4 without (DeepSpeed 0.19.8; stage 0 unscales first and matches)."""
    if train.precision == "fp16-mixed" and train.grad_clip and options.zero_stage > 0:
        raise ConfigError(f"deepspeed ZeRO-{options.zero_stage} with fp16-mixed would clip the loss-scaled gradients "
                          "(DeepSpeed's torch_autocast clips before it unscales)",
                          hint="use bf16-mixed, drop --grad-clip, or deepspeed:zero0")


def _is_native(script) -> bool:
    """Written for the deepspeed launcher: it initialises DeepSpeed itself (``deepspeed.initialize``, or only
    ``deepspeed.init_distributed`` for its process group) and never builds a paratrain Session. Read from the
    script's text, which is all there is before it runs; what the script's config really ran is noted at run time."""
    try:
        text = script.read_text(errors="replace")
    except OSError:
        return False
    return bool(_DEEPSPEED_CALL.search(text)) and "Session(" not in text


_DEEPSPEED_CALL = re.compile(r"\bdeepspeed\.(initialize|init_distributed)\s*\(")


def _not_applied(requested: str, stage: int, offload: str) -> list[str]:
    """The options written in ``requested`` (``deepspeed:zero1,config=ds.json``) that the script's run did not
    follow. Options the user did not write are not named: plain ``deepspeed`` asks for nothing in particular."""
    name, tokens = parse_spec(requested)
    given = DeepSpeedOptions.from_strings(name, expand_shorthands(name, DeepSpeedOptions, tokens))
    written = set(expand_shorthands(name, DeepSpeedOptions, tokens))
    out = []
    if "zero_stage" in written and given.zero_stage != stage:
        out.append(f"zero_stage={given.zero_stage}")
    if "offload" in written and given.offload != offload:
        out.append(f"offload={given.offload}")
    if "config" in written:
        out.append(f"config={given.config}")
    return out


def _announce_compile(rank: int) -> None:
    """On CPU, DeepSpeed JIT-compiles its shared-memory communication op the first time (about a minute on two
    cores) unless it was built at install time: say so rather than sit silent."""
    if torch.cuda.is_available() or rank != 0:
        return
    try:
        from deepspeed.git_version_info import installed_ops
        from torch.utils.cpp_extension import _get_build_directory
    except ImportError:
        return
    if installed_ops.get("deepspeed_shm_comm"):
        return
    built = os.path.join(_get_build_directory("deepspeed_shm_comm", verbose=False), "deepspeed_shm_comm.so")
    if not os.path.exists(built):
        notice("compiling DeepSpeed ops (first run only, about a minute)…")
