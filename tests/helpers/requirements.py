"""One requirement marker (like Lightning's RunIf) instead of ad-hoc skipif decorators."""

from __future__ import annotations

import importlib.util

import pytest

MISSING_PREFIX = "missing backend: "
# Modules `make test` installs (pyproject's [all,test] extras). A skip for one of these fails under CI=true.
MAKE_TEST_INSTALLS = {"torch", "typer", "rich", "pynvml", "psutil", "matplotlib", "pytest", "nbclient", "nbformat",
                      "ipykernel", "tensorflow", "tf_keras", "transformers"}


def installed_by_make_test(module: str) -> bool:
    return module in MAKE_TEST_INSTALLS


def requires(*modules: str, gpus: int = 0) -> pytest.MarkDecorator:
    """Skip unless every module imports (and, with ``gpus``, that many CUDA devices exist)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        return pytest.mark.skipif(True, reason=MISSING_PREFIX + " ".join(missing))
    if gpus:
        import torch

        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return pytest.mark.skipif(have < gpus, reason=f"needs {gpus} GPU(s), found {have}")
    return pytest.mark.skipif(False, reason="")
