"""paratrain: train the same script under every parallel method, measure them side by side, pick one."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Session", "TrainOptions", "__version__", "launch"]

if TYPE_CHECKING:
    from paratrain.launcher.api import launch
    from paratrain.options import TrainOptions
    from paratrain.session import Session


def __getattr__(name: str):
    # Lazy so that `paratrain --help` and `paratrain gpus` do not pay for importing torch.
    if name == "Session":
        from paratrain.session import Session

        return Session
    if name == "launch":
        from paratrain.launcher.api import launch

        return launch
    if name == "TrainOptions":
        from paratrain.options import TrainOptions

        return TrainOptions
    raise AttributeError(f"module 'paratrain' has no attribute {name!r}")
