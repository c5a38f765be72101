"""torch's import runs with the collector paused, and the collector's state afterwards is what it was before."""

import gc

import pytest

from paratrain.launcher.torch_import import collector_paused


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_is_paused_then_left_as_it_was(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    frozen = gc.get_freeze_count()
    try:
        with collector_paused():
            assert not gc.isenabled()
            made = [[i] for i in range(1000)]
        assert gc.isenabled() is enabled  # a script that turned the collector off keeps it off
        assert gc.get_freeze_count() >= frozen + len(made)
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
