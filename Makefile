# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-chaos check lint format bench compare chaos browser screenshots clean

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

test: check
	$(BIN)/pytest -q

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

# The chaos tests alone (tests/chaos, both brokers), two at a time: most of their time is
# spent waiting out leases, outages and restarts. About 5 minutes on 2 cores.
test-chaos: $(STAMP)
	$(BIN)/pytest -q -n 2 tests/chaos

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
