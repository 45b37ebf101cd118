# Front door of the vLLM 0.26.0 fork.  `make install` then `make test` work on
# a fresh machine with python3 (3.11+), git and network access to PyPI.
PYTHON ?= python3
# BASE=<version>: an extra base of requirements/upstream.toml (patches/bases/),
# with its own venv (the pinned upstream wheel and its torch).
BASE ?=
VENV ?= $(if $(BASE),.venv-$(BASE),.venv)
PY := $(VENV)/bin/python
FORKTOOL := $(PY) -m forktool $(if $(BASE),--base $(BASE))

.PHONY: help venv install test test-tools test-fork test-commits test-gpu patches check status clean

help:
	@echo "make install   build the fork wheel from the pinned upstream wheel and install it into $(VENV)"
	@echo "make test      the whole CPU test suite (tool tests + fork tests + upstream regression + each commit's own tests at that commit)"
	@echo "make test-gpu  the GPU regression suite (kernels at full size, backend, engine); fails without a usable GPU (ALLOW_NO_GPU=1 skips)"
	@echo "               stage by stage, each stopped after GPU_TIME_LIMIT=480 s; STAGE=kernels|kernels-grid|backend|upstream|engine|spec|spec-64|tp|no-compile|spec-warmup|spec-warmup-bf16|spec-ngram: one"
	@echo "make patches   materialize the fork tree and export dist/patches/v0.26.0/NNNN-*.patch"
	@echo "make check     series applies exactly, is canonical, passes upstream's lint"
	@echo "make status    the series and the installed version"
	@echo "BASE=0.33.0    any of the above on that extra base (its series: patches/bases/0.33.0/;"
	@echo "               install: the pinned upstream wheel into .venv-0.33.0; test: check, its CPU suite"
	@echo "               (patches/bases/0.33.0/cpu_suite.txt) and each commit's own tests)"

$(VENV)/.ready: requirements/fork-test.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/fork-test.txt -e .
	touch $@

venv: $(VENV)/.ready

install: venv
	$(FORKTOOL) install

ifeq ($(BASE),)
test: install test-tools check test-fork test-commits
else
test: install check test-fork test-commits
endif

test-tools: venv
	$(PY) -m pytest -q -p no:cacheprovider forktool/tests

test-fork: venv
	$(FORKTOOL) test

# Each commit's own tests against vLLM 0.26.0 plus the series up to that
# commit (what a maintainer who cherry-picks it gets).
test-commits: venv
	$(FORKTOOL) test --each-commit

# CUDA machines with the fork installed (`make install`).  Fails when CUDA is
# unusable, so a runner with a broken driver cannot pass; ALLOW_NO_GPU=1 skips.
# Every stage of forktool/gpu_suite.txt runs in its own pytest, interrupted
# after GPU_TIME_LIMIT seconds (it still prints what ran); STAGE=name runs
# one of them.
STAGE ?=
GPU_TIME_LIMIT ?= 480
test-gpu: venv
	$(PY) -m forktool test --gpu $(if $(ALLOW_NO_GPU),--allow-no-gpu) \
	    $(if $(STAGE),--stage $(STAGE)) --time-limit $(GPU_TIME_LIMIT)

patches: venv
	$(FORKTOOL) materialize
	$(FORKTOOL) export

check: venv
	$(FORKTOOL) check

status: venv
	$(FORKTOOL) status

clean:
	rm -rf build dist
