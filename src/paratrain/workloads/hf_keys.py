"""A Hugging Face config.json's keys checked against what its transformers config class knows.

Why: transformers keeps any key it does not know as a plain attribute and fills every key that is absent with the
class default, so ``num_hiden_layers`` or a config without ``hidden_size`` sized and trained a different model
(26.8M parameters instead of 7.0M) without a word. Real configs carry many keys the class does not declare
(``architectures``, ``torch_dtype``, ``rope_scaling``, ``transformers_version``, ``n_ctx``…), so an unknown key is
refused only when it is a near miss of a known key that the file lacks and transformers left at its default: that
is a typo, while an extra key is not.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any

from paratrain.errors import ConfigError

# What paratrain reads without a fallback to size and build the model (advise/models.py's transformer_of): a config
# lacking one of them describes the class default's model, not the user's.
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
CLOSE = 0.8  # difflib's ratio: one letter wrong, missing or doubled in a key of five letters or more


def check(path: Path, raw: dict[str, Any], config: Any) -> None:
    """One ConfigError line when ``raw`` (the file's JSON) misspells a key of ``config``'s class or lacks a
    required one; nothing otherwise. ``config`` is what transformers built from ``raw``."""
    cls = type(config)
    default = cls()
    aliases: dict[str, str] = dict(getattr(cls, "attribute_map", {}) or {})  # common name → the class's own
    known = set(default.to_dict()) | set(aliases) | set(_init_names(cls))

    def given(key: str) -> bool:
        """In the file under this name or its alias, or set by transformers from a legacy name it translates."""
        if key in raw or aliases.get(key) in raw or any(own == key and alias in raw for alias, own in aliases.items()):
            return True
        return _differs(getattr(config, key, None), getattr(default, key, None))

    problems, meant = [], set()
    for key in sorted(set(raw) - known):
        close = [k for k in difflib.get_close_matches(key, known, n=3, cutoff=CLOSE) if not given(k)]
        if close:
            problems.append(f'unknown key "{key}" (did you mean "{close[0]}"?)')
            meant.add(close[0])
    problems += [f'no "{key}", a key paratrain needs (transformers would fill in {getattr(default, key, None)})'
                 for key in REQUIRED if key not in meant and not given(key)]
    if problems:
        raise ConfigError(f"{path}: {'; '.join(problems)}",
                          hint=f"spell and give the keys as transformers' {cls.__name__} names them")


def _init_names(cls: type) -> list[str]:
    """The keyword arguments the class's constructor takes by name (its documented keys)."""
    try:
        params = inspect.signature(cls.__init__).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def _differs(value: Any, default: Any) -> bool:
    try:
        return bool(value != default)
    except Exception:  # values whose comparison is not a bool (tensors): treat as set
        return True
