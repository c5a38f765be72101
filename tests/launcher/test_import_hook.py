"""An import hook runs around the module's import, even when something only looked the module up first."""

from __future__ import annotations

import importlib
import importlib.util
import sys

from paratrain.launcher.import_hook import ImportHook


def test_a_look_up_before_the_import_does_not_use_the_hook_up(tmp_path, monkeypatch):
    """DeepSpeed's availability check (importlib.util.find_spec) runs inside the Session before its import."""
    (tmp_path / "hooked_mod.py").write_text("value = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[str] = []

    def around(execute, module) -> None:
        execute(module)
        seen.append(module.__name__)

    hook = ImportHook("hooked_mod", around)
    hook.install()
    try:
        assert importlib.util.find_spec("hooked_mod") is not None and seen == []
        assert hook in sys.meta_path  # still waiting for the import
        assert importlib.import_module("hooked_mod").value == 1
        assert seen == ["hooked_mod"] and hook not in sys.meta_path  # used once, then gone
    finally:
        hook.uninstall()
        sys.modules.pop("hooked_mod", None)
