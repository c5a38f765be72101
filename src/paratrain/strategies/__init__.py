"""Training methods behind one protocol; see :mod:`paratrain.strategies.registry`."""

from paratrain.strategies.base import Availability, Method, Strategy, StrategyOptions
from paratrain.strategies.registry import REGISTRY, availability, info, names, resolve

__all__ = [
    "REGISTRY",
    "Availability",
    "Method",
    "Strategy",
    "StrategyOptions",
    "availability",
    "info",
    "names",
    "resolve",
]
