# Two commands on a fresh machine: `make up` runs the system, `make test` runs the tests.
# Both use one virtualenv made from pyproject.toml: `up` installs what running needs,
# `test` adds the development tools (the `dev` extra). Either may come first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: up demo-model test tck bench lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# What running needs: the package and its dependencies, no test or lint tool.
$(VENV)/.runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# What developing needs besides: the `dev` extra (it includes all of the above).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.runtime

# The API's port is $PORT (default 8000), as for `jarvis-agents up`: `PORT=8080 make up`.
up: $(VENV)/.runtime
	$(BIN)/jarvis-agents up

# A demo model server where OLLAMA_HOST says (default: Ollama's 127.0.0.1:11434), to try
# `make up` with no model server: run it in a terminal of its own (README, Quick start).
demo-model: $(VENV)/.runtime
	$(BIN)/jarvis-agents demo-model

# Four sessions at once (pytest-xdist), each test file in one of them: the tests mostly
# wait on servers and processes, so four share 2 cores well. The files marked `long` are
# handed out first (tests/conftest.py), not last. PYTEST_ARGS=-n0 runs them in one session.
PYTEST_ARGS ?= -n 4 --dist loadfile --no-loadscope-reorder

test: $(VENV)/.installed
	$(BIN)/pytest $(PYTEST_ARGS)

# The official A2A TCK's mandatory category against a real API and worker (README, A2A):
# the TCK at a pinned commit, shipped in third_party/ (Apache-2.0) so that CI needs no
# GitHub, unpacked outside the repository with a virtualenv of its own requirements;
# tests/integration/test_a2a_tck.py runs it.
A2A_TCK_COMMIT := 410ba92e1b264df895e1fe6eccfe22db7aeaab06
A2A_TCK_ARCHIVE := third_party/a2a-tck-$(A2A_TCK_COMMIT).tar.gz
A2A_TCK_DIR ?= $(or $(TMPDIR),/tmp)/jarvis-a2a-tck-$(A2A_TCK_COMMIT)

$(A2A_TCK_DIR)/.venv/.installed: $(A2A_TCK_ARCHIVE)
	rm -rf $(A2A_TCK_DIR)
	mkdir -p $(A2A_TCK_DIR)
	tar -xzf $(A2A_TCK_ARCHIVE) -C $(A2A_TCK_DIR) --strip-components=1
	$(PYTHON) -m venv $(A2A_TCK_DIR)/.venv
	$(A2A_TCK_DIR)/.venv/bin/pip install --quiet --upgrade pip
	cd $(A2A_TCK_DIR) && .venv/bin/pip install --quiet -e .
	touch $@

tck: $(VENV)/.installed $(A2A_TCK_DIR)/.venv/.installed
	A2A_TCK_DIR=$(A2A_TCK_DIR) $(BIN)/pytest tests/integration/test_a2a_tck.py -n0 -q

bench: $(VENV)/.installed
	$(BIN)/python -m bench

lint: $(VENV)/.installed
	$(BIN)/ruff check jarvis_agents workers api mcp_server tests bench deploy examples

# What Heroku-style buildpacks install for the Procfile; committed, and written only from
# pyproject.toml (tests/unit/test_deploy_files.py fails when it is stale).
requirements.txt: pyproject.toml deploy/requirements.py
	$(PYTHON) deploy/requirements.py --procfile pyproject.toml > $@

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis test-artifacts
