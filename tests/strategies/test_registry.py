"""Method names, spec strings and their errors."""

import pytest

from paratrain.errors import ConfigError, StrategyUnavailableError, UnknownStrategyError
from paratrain.strategies import registry
from paratrain.strategies.base import Method, parse_spec
from paratrain.strategies.fsdp import FSDPOptions, FSDPStrategy


def test_every_design_name_is_registered():
    assert registry.names() == ["single", "dp", "ddp", "fsdp", "tp", "fsdp+tp", "pp", "deepspeed", "horovod",
                                "mirrored", "multiworker"]


def test_spec_with_options_and_shorthands():
    assert parse_spec("fsdp:shard=grad_op,offload") == ("fsdp", {"shard": "grad_op", "offload": ""})
    cls, opts = registry.resolve("fsdp:grad_op,offload")
    assert cls is FSDPStrategy and opts == FSDPOptions(shard="grad_op", offload="cpu")


def test_environment_options_apply_and_spec_wins():
    _, opts = registry.resolve("fsdp:shard=none", {"shard": "full", "offload": "cpu", "zero_stage": "2"})
    assert opts == FSDPOptions(shard="none", offload="cpu")


def test_unknown_name_suggests_the_closest():
    with pytest.raises(UnknownStrategyError, match='Did you mean "fsdp"'):
        registry.resolve("fdsp")


def test_bad_option_value_lists_the_choices():
    with pytest.raises(ConfigError, match="is not one of full, grad_op, none"):
        registry.resolve("fsdp:shard=everything")


def test_unimplemented_method_is_a_clear_error_not_a_crash():
    planned = registry.MethodInfo(Method.MIRRORED, "tensorflow", ("local",), "a method still to come", None, False)
    assert not planned.implemented
    with pytest.raises(StrategyUnavailableError, match="not implemented"):
        planned.load()


def test_a_file_option_is_the_users_file_wherever_it_is_read(tmp_path, monkeypatch):
    """deepspeed:config=ds.json names a file in the folder the user typed it in; a compare cell or worker that runs
    in another folder must read that one."""
    (tmp_path / "ds.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    _, opts = registry.resolve("deepspeed:zero1,config=ds.json")
    assert opts.config == str(tmp_path / "ds.json")
    monkeypatch.chdir("/")
    assert registry.resolve(f"deepspeed:zero1,config={opts.config}")[1] == opts


def test_a_list_of_specs_keeps_each_methods_options_together():
    assert registry.split_specs("single, deepspeed:zero2,config=ds.json,ddp,fsdp:shard=grad_op,offload") == [
        "single", "deepspeed:zero2,config=ds.json", "ddp", "fsdp:shard=grad_op,offload"]
    assert registry.split_specs("ddp,fdsp") == ["ddp", "fdsp"]  # a typo stays a spec of its own, to be named


def test_each_methods_precisions_are_its_strategys():
    """advise reads a method's precisions from the registry without importing its Strategy (and torch): they must
    be what the Strategy takes, or advise would rank a run paratrain refuses, or refuse one it runs."""
    from paratrain.strategies import registry

    checked = 0
    for entry in registry.entries():
        if entry.framework == "torch" and entry.implemented:
            assert entry.precisions is not None, entry.method
            assert set(entry.precisions) == set(entry.load().supported_precision), entry.method
            checked += 1
    assert checked >= 9
