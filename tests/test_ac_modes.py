"""Activation checkpointing's modes (paratrain/ac_modes.py): one spelling for every place that reads them."""

from __future__ import annotations

import pytest

from paratrain import ac_modes
from paratrain.errors import ConfigError


@pytest.mark.parametrize(("given", "mode"), [(None, False), (False, False), ("none", False), (True, "full"),
                                             ("full", "full"), ("OP", "op"), (" every:2 ", "every:2"),
                                             ("every:02", "every:2"), ("every:1", "every:1")])
def test_each_spelling_is_one_mode(given, mode):
    assert ac_modes.parse(given) == mode
    assert ac_modes.parse(ac_modes.parse(given)) == mode  # parsing the parsed value changes nothing


@pytest.mark.parametrize("given", ["every:0", "every:x", "every:", "every", "every:-1", "selective", "", 1, 2.0])
def test_anything_else_is_one_line_naming_the_modes(given):
    with pytest.raises(ConfigError, match=r"is not a mode: none, full, op or every:N") as info:
        ac_modes.parse(given)
    assert "\n" not in info.value.one_line()


def test_which_blocks_each_mode_checkpoints():
    """every:N counts from 1, as torchtitan's ac_freq does: every:2 of four blocks is the 2nd and the 4th."""
    assert ac_modes.checkpointed(False, 3) == [False] * 3
    assert ac_modes.checkpointed("full", 3) == ac_modes.checkpointed("op", 3) == [True] * 3
    assert ac_modes.checkpointed("every:2", 4) == [False, True, False, True]
    assert ac_modes.checkpointed("every:3", 7) == [False, False, True, False, False, True, False]
    assert ac_modes.checkpointed("every:1", 2) == [True, True]


def test_words_say_the_mode():
    assert ac_modes.name(False) == "none" and ac_modes.name(True) == "full"
    assert ac_modes.words("op") == "selective (per-op) activation checkpointing"
    assert ac_modes.words("every:2") == "activation checkpointing of every 2nd block"
    assert ac_modes.words("every:11") == "activation checkpointing of every 11th block"
    assert ac_modes.words("every:1") == "activation checkpointing of every block"
    assert ac_modes.every("every:3") == 3 and ac_modes.every("op") is None
