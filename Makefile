# Two commands matter: `make demo` and `make test`. Both set everything up first (idempotent).
.PHONY: setup demo test lint bench soak clean
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

# Two workers (pytest-xdist), each with its own Spark session, Azurite and broker; worksteal evens out
# the few long `sparza run` tests. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 -n $(TEST_WORKERS) --dist worksteal

# The fault harness on random seeds for MINUTES (default 60): prints each scenario's verdict, every
# failing seed's one-line reproduction, and a final count. Starts no scenario after the time is up.
MINUTES ?= 60
soak:
	PYTHONPATH=src:. $(PY) -m sparza.testing.harness --soak $(MINUTES)

bench: setup
	$(PY) bench/run_all.py --scale small

clean:
	rm -rf $(VENV) node_modules .sparza
