"""paratrain: train the same script under every parallel method, measure them side by side, pick one."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Session", "__version__"]

if TYPE_CHECKING:
    from paratrain.session import Session


def __getattr__(name: str):
    # Lazy so that `paratrain --help` and `paratrain gpus` do not pay for importing torch.
    if name == "Session":
        from paratrain.session import Session

        return Session
    raise AttributeError(f"module 'paratrain' has no attribute {name!r}")
