# paratrain developer commands. Every target creates .venv if missing and installs the local CPU wheel of torch
# first (pinned), so that no dependency ever pulls a multi-GB CUDA build. Second runs are quick (stamp files).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# Override where no local CPU wheel exists, e.g. TORCH="torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
TORCH  ?= torch==2.13.0

.PHONY: help install install-all install-horovod test lint demo clean

help:
	@echo "make demo         create .venv, install every method (Horovod's build included), show this machine, run paratrain compare"
	@echo "make test         create .venv, install all extras + test tools, run lint and the whole test suite"
	@echo "make install      core package only (torch, typer, rich, nvidia-ml-py, psutil)"
	@echo "make install-all  every extra: [all,test]"
	@echo "make install-horovod  build (or reuse the cached) Horovod wheel: paratrain setup horovod"
	@echo "make lint         ruff, then mypy over strategies/, launcher/ and the Session"

$(VENV)/.torch:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install $(TORCH)
	touch $@

$(VENV)/.core: $(VENV)/.torch pyproject.toml
	$(PIP) install -e .
	touch $@

$(VENV)/.all: $(VENV)/.core pyproject.toml
	$(PIP) install -e ".[all,test]"
	# DeepSpeed compiles its CPU communication op on first use (about a minute): pay it here, once, not in a test.
	DS_ACCELERATOR=cpu $(PY) -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()" \
		> /dev/null
	# tf_keras for multiworker fit(); --no-deps, matching the installed TensorFlow's minor version.
	$(PIP) install --no-deps "tf_keras==$$($(PY) -c 'import importlib.metadata as m; print(".".join(m.version("tensorflow-cpu").split(".")[:2]))').*"
	touch $@

install: $(VENV)/.core

install-all: $(VENV)/.all

# Horovod's last release needs a patched build for current torch and CMake (minutes, once; then a cached wheel).
$(VENV)/.horovod: $(VENV)/.all
	$(VENV)/bin/paratrain setup horovod
	touch $@

install-horovod: $(VENV)/.horovod

# mypy reads its files and settings from [tool.mypy] in pyproject.toml.
lint: $(VENV)/.all
	$(VENV)/bin/ruff check src tests examples benchmarks
	$(VENV)/bin/mypy

# Two pytest workers, each test file on one of them (its module fixtures run once): most tests start processes
# that spend part of their time starting up and waiting on each other, so two at once use 2 cores better than one.
# PYTEST_WORKERS=0 runs them one at a time. Tests marked serial reinstall packages: they run alone, afterwards.
PYTEST_WORKERS ?= 2
test: lint $(VENV)/.horovod
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial"
	OMP_NUM_THREADS=1 $(PY) -m pytest -m serial

# Every default cell of the comparison runs: Horovod's build (minutes, once) is part of the first demo.
demo: $(VENV)/.horovod
	$(VENV)/bin/paratrain gpus
	$(VENV)/bin/paratrain compare --out runs/demo
	@echo "report: runs/demo/report.md (plots beside it); past runs: $(VENV)/bin/paratrain history"

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .ruff_cache .mypy_cache
