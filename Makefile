# Two commands on a fresh machine: `make up` runs the system, `make test` runs the tests.
# Each creates the virtualenv it needs from pyproject.toml.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up test bench lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

up: $(VENV)/.installed
	$(BIN)/jarvis-agents up

test: $(VENV)/.installed
	$(BIN)/pytest

bench: $(VENV)/.installed
	$(BIN)/python -m bench

lint: $(VENV)/.installed
	$(BIN)/ruff check jarvis_agents workers api tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis test-artifacts
