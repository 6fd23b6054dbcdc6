# Two commands matter: `make demo` and `make test`. Both set everything up first (idempotent).
.PHONY: setup demo test lint bench clean
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python

setup:
	@bash scripts/setup.sh

demo: setup
	$(VENV)/bin/sparza demo

lint: setup
	$(VENV)/bin/ruff check .

test: setup lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=15

bench: setup
	$(PY) bench/run_all.py --scale small

clean:
	rm -rf $(VENV) node_modules .sparza
