# The two commands a new user runs are `make demo` and `make test`; both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test soak bench lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/harvest demo

# Two workers by default (pytest-xdist): most of a test waits on sandboxes and harvest subprocesses.
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS)

soak: install
	$(BIN)/python -m pytest -q -s -m soak tests/test_soak.py

bench: install
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) data .pytest_cache .mypy_cache .ruff_cache
