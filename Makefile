# The template repository's two commands: `make main` (the main job) and `make test` (every test).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
BUILD ?= build
# What `cookiecutter --no-input` generates (see cookiecutter.json).
PROJECT := $(BUILD)/image-classifier
PACKAGE := image_classifier

.PHONY: help setup main test test-faults test-bench test-gpu test-stacks test-installs lint bench clean

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

# The MLflow tracking server runkit's trackers' tests start runs from an environment of its own (~1 min to build):
# the `mlflow` server package, whose pandas, numpy and aiohttp stay out of .venv (mlflow-server.txt says why).
MLFLOW_VENV ?= .venv-mlflow
MLFLOW_SERVER_REQUIREMENTS := runkit/tests/mlflow-server.txt
# The S3 server the tests of runs in object storage start (moto's, S3 only; ~1 min to build), apart the same way.
MOTO_VENV ?= .venv-moto
MOTO_SERVER_REQUIREMENTS := runkit/tests/moto-server.txt
SERVERS := MLFLOW_SERVER=$(abspath $(MLFLOW_VENV))/bin/mlflow MOTO_SERVER=$(abspath $(MOTO_VENV))/bin/moto_server

# The three environments are built at once (-j3): 39 and 58 s against 71 and 84 s one after another (2 cores, load 1.2-1.4).
setup: ## Create .venv with the pinned stack (constraints.txt), .venv-mlflow and .venv-moto.
	@$(MAKE) --no-print-directory -j3 $(VENV)/.installed $(MLFLOW_VENV)/.installed $(MOTO_VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt runkit/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=25.1"
	$(BIN)/python -m pip install --quiet --constraint constraints.txt --group dev
	# runkit, editable from this checkout: what every baked project runs (their tests install them --no-deps).
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable runkit
	touch $@

$(MLFLOW_VENV)/.installed: $(MLFLOW_SERVER_REQUIREMENTS)
	$(PYTHON) -m venv $(MLFLOW_VENV)
	$(MLFLOW_VENV)/bin/python -m pip install --quiet --no-deps --requirement "$(MLFLOW_SERVER_REQUIREMENTS)"
	touch $@

$(MOTO_VENV)/.installed: $(MOTO_SERVER_REQUIREMENTS)
	$(PYTHON) -m venv $(MOTO_VENV)
	$(MOTO_VENV)/bin/python -m pip install --quiet --no-deps --requirement "$(MOTO_SERVER_REQUIREMENTS)"
	touch $@

main: $(VENV)/.installed ## Bake a project with the default answers, train it on its default config, validate the best checkpoint.
	rm -rf $(PROJECT)
	$(BIN)/cookiecutter --no-input --output-dir $(BUILD) .
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable $(PROJECT)
	cd $(PROJECT) && $(BIN)/$(PACKAGE) fit --trainer.enable_progress_bar false
	cd $(PROJECT) && $(BIN)/$(PACKAGE) validate --ckpt_path best --trainer.enable_progress_bar false

# Two workers, the longest tests first (tests/durations.json: runkit's suite in 4 parts, tests/test_runkit.py, the
# default project's whole suite, the upgrade, ...), dealt to them in turn; an idle one steals the other's short tail.
# Left out, each with its own target: runkit's `faults`
# tests (test-faults), the benchmark scripts (test-bench), GPU-only tests (test-gpu: they skip here), the stacks and
# the installs (test-stacks, test-installs).
# One torch thread per process (OMP_NUM_THREADS=1): the two workers and the commands and DDP processes they start
# already fill the cores, and a second thread each only spun waiting (runkit's part 2: 10 % less CPU, the same time).
# runkit's bytecode is written first: where PYTHONDONTWRITEBYTECODE is set (CI, this machine), every command a test
# starts compiled runkit and the test task again (runkit's part 2: 4.5 % less CPU).
test: setup ## Run every test: lint, hooks, bakes, runkit's suite once, and each generated project's own suite.
	$(BIN)/python -m compileall -q runkit/src runkit/tests >/dev/null
	$(SERVERS) OMP_NUM_THREADS=1 $(BIN)/python -m pytest --numprocesses 2 --dist worksteal --durations=15

# Long (two multi-GB installs, two whole suites: ~25 min on 2 cores) and apart from `make test`: run it when moving
# the generated pyproject.toml's ranges. ARGS: e.g. --only '[lowest]' --keep true
# runkit's long tests (~70 min on 2 cores): the whole fault matrix, the DDP stops, MLflow on PostgreSQL, ...
test-faults: setup ## Run runkit's long tests, marked faults, that `make test` leaves out.
	cd runkit && $(SERVERS) $(BIN)/python -m pytest --faults -m faults $(ARGS)

# Every benchmark script end to end on a baked project in tiny mode (its numbers measure nothing; ~3 min on 2 idle
# cores): run it when changing runkit/bench/.
test-bench: setup ## Run each benchmark script in tiny mode on a baked project (tests marked bench).
	$(BIN)/python -m pytest -m bench $(ARGS)

# On a machine with a CUDA GPU: quantized export on CUDA (float8 needs compute capability >= 8.9), ... Without one
# every test skips and says why (-rs).
test-gpu: setup ## Run runkit's GPU-only tests (marked gpu); each skips with its reason where no GPU is present.
	cd runkit && $(BIN)/python -m pytest -m gpu -rs $(ARGS)

test-stacks: setup ## Run the default project's suite on the lowest and the newest stack it declares (stacks-results.txt).
	$(BIN)/python scripts/test_stacks.py --python $(PYTHON) $(ARGS)

# Long (three fresh venvs with torch's CPU wheel, three whole suites: ~12 min on 2 cores) and apart from `make test`:
# run it when moving how projects require runkit (local_extensions.py) or how it is built. ARGS: e.g. --only '[index]'
test-installs: setup ## Install a project each way it gets runkit (index, git tag, checkout), run its tests (installs-results.txt).
	$(BIN)/python scripts/test_installs.py --python $(PYTHON) $(ARGS)

bench: setup ## Measure runkit in a baked default project (runkit/docs/benchmarks.md); ARGS: e.g. --only '[overhead]'
	rm -rf $(PROJECT)
	$(BIN)/cookiecutter --no-input --output-dir $(BUILD) .
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable $(PROJECT)
	$(BIN)/python runkit/bench/run.py $(ARGS)

lint: setup ## Lint the template repository (generated projects are linted by the tests).
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean: ## Remove .venv, .venv-mlflow, .venv-moto and build/.
	rm -rf $(VENV) $(MLFLOW_VENV) $(MOTO_VENV) $(BUILD)
