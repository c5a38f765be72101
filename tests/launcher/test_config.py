"""paratrain.toml's values are checked against RunConfig's field types, each error naming the key, the value as
written and the type expected (a string where a number belongs used to fail later, deep in the launcher)."""

from __future__ import annotations

import pytest

from paratrain.errors import ConfigError
from paratrain.launcher.config import load_config, merge


def _load(tmp_path, line: str) -> dict:
    file = tmp_path / "paratrain.toml"
    file.write_text(f"[run]\n{line}\n")
    return load_config(str(file))


@pytest.mark.parametrize(("line", "words"), [
    ('nproc = "two"', 'nproc = "two" must be an integer'),
    ("nproc = 2.5", "nproc = 2.5 must be an integer"),
    ("nproc = true", "nproc = true must be an integer"),
    ("timeout = \"soon\"", 'timeout = "soon" must be a number'),
    ("verbose = \"yes\"", 'verbose = "yes" must be true or false'),
    ("per_rank_batch = 1", "per_rank_batch = 1 must be true or false"),
    ("strategy = 3", "strategy = 3 must be a string"),
    ("compile = 3", "compile = 3 must be true or false or a string"),
    ("grad-clip = [1, 2]", "grad_clip = [1, 2] must be a number"),
])
def test_a_value_of_the_wrong_type_is_named_with_its_key(tmp_path, line, words):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, line)
    assert info.value.message.startswith(f"{tmp_path / 'paratrain.toml'}: ")
    assert words in info.value.message


def test_a_quoted_number_gets_the_hint_to_drop_the_quotes(tmp_path):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, 'nproc = "2"')
    assert "without quotes" in (info.value.hint or "")


@pytest.mark.parametrize("line", ["nproc = 2", "timeout = 120", "timeout = 1.5", 'compile = "aot_eager"',
                                  "compile = true", 'strategy = "fsdp:shard=grad_op"', "verbose = false"])
def test_values_of_the_right_type_pass(tmp_path, line):
    values = _load(tmp_path, line)
    merge(values, {})  # and RunConfig takes them
