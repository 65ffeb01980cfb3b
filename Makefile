# waitbound — one gate: `make test`; `make demo` shows the main job on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-test

.PHONY: demo test test-deep check test-repeat lint typecheck pytest bench clean

# The browser tests drive Debian's Chromium (Playwright's own download is not used).
CHROMIUM := /usr/bin/chromium

# The suite starts a few hundred Python processes, and pytest-xdist workers collect every
# test module: with bytecode written, each module is compiled (a test module's asserts
# rewritten) once, not in every process. An environment that turns it off (a sandbox's
# PYTHONDONTWRITEBYTECODE) made collection three times slower.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/python examples/demo.py

lint: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks

# Two mypy workers: a fresh clone (no .mypy_cache) type-checks in about 14 s, not 18 s.
typecheck: $(STAMP)
	$(BIN)/mypy --num-workers 2

# Unit, property, contract and scenario tests (the scenario files run in-process on
# virtual time) first; then the end-to-end tests, which run real processes on real time
# (their elapsed-time bounds must not compete with the CPU-heavy tests for 2 cores).
# Property tests run the example counts they are written with (the `ci` profile). The
# end-to-end tier collects only its folders and runs 6 workers (its tests mostly wait on
# other processes), the groups of tests/conftest.py on one worker each (--dist loadgroup);
# each tier ends with its 15 slowest tests, so a new slow one is seen.
pytest: $(STAMP) $(CHROMIUM)
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -n 4 --durations=15 -m "not e2e"
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -n 6 --dist loadgroup --durations=15 -m e2e tests/e2e tests/browser

test: lint typecheck pytest

# The inner loop: lint, types, unit and property tests (the fast Hypothesis profile);
# no end-to-end, scenario or browser test. `make test` is still the gate.
check: $(STAMP)
	$(BIN)/ruff check src tests examples benchmarks
	$(BIN)/ruff format --check src tests examples benchmarks
	$(BIN)/mypy --num-workers 2
	$(BIN)/pytest -n 4 -q -m "not e2e" --ignore=tests/e2e --ignore=tests/browser

# The property tests' deep profile (4x the examples each test names; 1,000 where it
# names none): a longer hunt before a change to the rules lands; not part of the gate.
test-deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep $(BIN)/pytest -n 4 -q -m "not e2e" --ignore=tests/e2e --ignore=tests/browser

# `make test` N times in a row (default 10) while another process keeps one core busy,
# as on a loaded CI machine; stops at the first failure; prints each run's duration.
N ?= 10
test-repeat: $(STAMP) $(CHROMIUM)
	@$(BIN)/python -c 'while True: pass' & busy=$$!; \
	trap 'kill $$busy 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq 1 $(N)); do \
		start=$$(date +%s); \
		if ! $(MAKE) --no-print-directory test; then \
			echo "test-repeat: run $$i of $(N) FAILED after $$(( $$(date +%s) - start ))s"; \
			exit 1; \
		fi; \
		echo "test-repeat: run $$i of $(N) passed in $$(( $$(date +%s) - start ))s"; \
	done; \
	echo "test-repeat: $(N) runs passed"

# Installed only when missing (CI: root on a fresh machine).
$(CHROMIUM):
	apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium

# Benchmarks of issues 4, 12, 13 and 15, not part of `make test`; figures in
# docs/benchmarks.md. About an hour (the fleet simulation ~15 min of CPU, the schedule
# benchmark 10-20 min); PostgreSQL at $WAITBOUND_BENCH_PG_DSN (default: the tests' server).
# The schedule benchmark runs the peers' own code: the bench extra.
BENCH_STAMP := $(VENV)/.installed-bench

$(BENCH_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@ $(STAMP) $(VENV)/.installed

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.store_throughput
	$(BIN)/python -m benchmarks.scale
	$(BIN)/python -m benchmarks.fleet_pressure
	$(BIN)/python -m benchmarks.inbox_pages
	$(BIN)/python -m benchmarks.webhooks_in
	$(BIN)/python -m benchmarks.poll_overhead
	$(BIN)/python -m benchmarks.fleet_sim
	$(BIN)/python -m benchmarks.schedule_efficiency
	$(BIN)/python -m benchmarks.learned_schedule
	$(BIN)/python -m benchmarks.fleet_waves
	$(BIN)/python -m benchmarks.budget_fit
	$(BIN)/python -m benchmarks.pace_far

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .demo
