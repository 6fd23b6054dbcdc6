# Two commands matter: `make demo` and `make test`. Both set everything up first (idempotent).
.PHONY: setup demo test lint docs bench soak clean
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/sparza demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The generated parts of the docs: the config reference (from the key registry) and the package picture of
# docs/architecture.md (from the imports). tests/docs fails when either is stale.
docs: setup
	$(PY) -m sparza.config.reference > docs/config-reference.md
	$(PY) scripts/architecture.py --write

# Two workers (pytest-xdist), each with its own Spark session, Azurite and broker; worksteal evens out
# the few long `sparza run` tests. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist worksteal

# The fault harness on random seeds for MINUTES (default 60) on both engines: in-process (TestRunner, no
# Spark; thousands of scenarios) for a third of the time, then Spark (`sparza run`) for the rest. Prints
# every failure with its one-line reproduction for each engine and both counts. SOAK_ENGINE=inprocess or
# spark runs one engine for the whole time. Starts no scenario after the time is up.
MINUTES ?= 60
SOAK_ENGINE ?= both
soak:
	PYTHONPATH=src:. $(PY) -m sparza.testing.harness --soak $(MINUTES) --engine $(SOAK_ENGINE)

bench: setup
	$(PY) bench/run_all.py --scale small

clean:
	rm -rf $(VENV) node_modules .sparza
