# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-chaos check lint format bench compare chaos browser screenshots clean

# The suite runs in parallel (pytest-xdist): its tests mostly wait on worker processes,
# leases and PostgreSQL, so more test processes than cores pay (tests/README.md has the
# figures). worksteal: an idle test process takes work queued for a busy one, so one
# long test does not leave the others' queues waiting behind it.
TEST_WORKERS ?= 4
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist load

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sluicegate demo

check: $(STAMP)
	$(BIN)/ruff check src tests bench chaos examples docs/screenshots.py
	$(BIN)/ruff format --check src tests bench chaos examples docs/screenshots.py
	$(BIN)/mypy
	$(BIN)/lint-imports

# Everything: lint and types, then the whole suite (chaos and browser tests included),
# with the 25 slowest tests listed at the end.
test: check
	$(BIN)/pytest -q $(PYTEST_PARALLEL) --durations=25

# The inner loop, run on every commit: unit tests, the conformance suite on the memory
# and SQLite brokers, and the CLI. Under 90 s.
test-fast: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_PARALLEL) -m "not slow" -k "not postgresql" \
		tests/unit tests/cli tests/brokers/test_conformance.py

format: $(STAMP)
	$(BIN)/ruff format src tests bench chaos examples docs/screenshots.py
	$(BIN)/ruff check --fix src tests bench chaos examples docs/screenshots.py

bench: $(STAMP)
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/pools.py

# sluicegate side by side with its peers (bench/README.md, "Peer comparison"); the peers
# are installed into .venv-peers from bench/peers/requirements.txt on first use.
compare: $(STAMP)
	$(BIN)/python bench/compare.py

# A seeded soak on a throwaway PostgreSQL cluster under faults (docs/chaos.md); not part
# of `make test`. CHAOS_MINUTES (default 5), CHAOS_SEED (default: random, printed).
CHAOS_MINUTES ?= 5
CHAOS_SEED ?=
chaos: $(STAMP)
	$(BIN)/python chaos/soak.py --minutes $(CHAOS_MINUTES) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --out chaos-report.txt

# The chaos tests alone (tests/chaos, both brokers), in parallel: most of their time is
# spent waiting out leases, outages and restarts.
test-chaos: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_PARALLEL) tests/chaos

# The dashboard's browser tests drive Debian's Chromium through Playwright (never a browser
# downloaded at test time). Without it they are skipped with the reason, except in CI.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium \
		|| { $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium; }; }
	@chromium --version

# The dashboard's screenshots in docs/img (docs/dashboard.md), taken while the demo's
# workload runs on real worker and dashboard processes.
screenshots: $(STAMP) browser
	$(BIN)/python docs/screenshots.py --rounds 60 --warm-up 180

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
