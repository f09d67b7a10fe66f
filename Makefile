# The README's two set-up commands.  Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench validate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# 1. Install and run the main job on the embedded default: in-process backend, shipped catalog.
demo: $(BIN)/python
	$(BIN)/python -m pip install --quiet .
	$(BIN)/envfactory list
	$(BIN)/envfactory rollout envfactory/HotelBooking-v0 --policy oracle
	$(BIN)/envfactory rollout envfactory/HotelBooking-v0 --policy noisy --seed 0 --out trajectories.jsonl

# 2. Install what the tests need and run them.  pytest's exit code 5 (nothing collected) is a failure.
test: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	@$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python bench/bench_runtime.py
	$(BIN)/python bench/bench_server.py

validate: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/envfactory validate --all

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache trajectories.jsonl
