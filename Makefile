# Two commands from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test check lint format bench chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sluicegate demo

check: $(STAMP)
	$(BIN)/ruff check src tests bench chaos
	$(BIN)/ruff format --check src tests bench chaos
	$(BIN)/mypy
	$(BIN)/lint-imports

test: check
	$(BIN)/pytest -q

format: $(STAMP)
	$(BIN)/ruff format src tests bench chaos
	$(BIN)/ruff check --fix src tests bench chaos

bench: $(STAMP)
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/pools.py

# A seeded soak on a throwaway PostgreSQL cluster under faults (docs/chaos.md); not part
# of `make test`. CHAOS_MINUTES (default 5), CHAOS_SEED (default: random, printed).
CHAOS_MINUTES ?= 5
CHAOS_SEED ?=
chaos: $(STAMP)
	$(BIN)/python chaos/soak.py --minutes $(CHAOS_MINUTES) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) --out chaos-report.txt

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
