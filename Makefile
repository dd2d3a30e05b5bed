# One reproducible set-up for users and CI: a virtual environment with k2conform, its
# test tools, and the real parsers under test (pinned, CPU-only, installed --no-deps).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.k2conform-installed

.PHONY: setup matrix test fuzz bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements/parsers.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-deps -r requirements/parsers.txt
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/pip check || true
	touch $(STAMP)

# The main job: every case x every shipped adapter x every delivery mode, gated by the baseline.
matrix: setup
	$(BIN)/k2conform run --baseline baseline.json --html report/index.html --json report/results.json --markdown report/summary.md

test: setup
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) report
