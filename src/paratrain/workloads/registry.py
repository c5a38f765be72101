"""The bundled workloads by name: which there are, and the one ``--workload NAME`` asks for.

Why a module of its own: the workload modules import base.py for :class:`Built` and :class:`Workload`, so base.py
cannot also import them to look them up (an import cycle). This registry sits above both, and imports the workload
modules only when one is asked for: listing the names (``--help``, a misspelt name) builds nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paratrain.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    from paratrain.workloads.base import Workload

WORKLOADS = ("mlp", "cnn", "gpt", "llama")


def _registry() -> dict[str, Workload]:
    from paratrain.workloads import cnn, gpt, llama, mlp

    return {w.name: w for w in (mlp.WORKLOAD, cnn.WORKLOAD, gpt.WORKLOAD, llama.WORKLOAD)}


def get(name: str) -> Workload:
    """The bundled workload called ``name``, or the model of a local Hugging Face config (``hf:PATH``); a
    ConfigError naming the bundled ones (and the closest) otherwise."""
    if name.startswith("hf:"):
        from paratrain.workloads import llama

        return llama.from_config(name)
    found = _registry().get(name)
    if found is None:
        known = ", ".join(WORKLOADS)
        raise ConfigError(f'unknown workload "{name}" (bundled: {known}).{did_you_mean(name, WORKLOADS)}',
                          hint="or a Hugging Face config (hf:PATH/config.json), or your script (--script train.py)")
    return found
