# The two commands a new user runs are `make demo` and `make test`; both install first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DUCKDB1 := $(VENV)/duckdb-1x/.downloaded

.PHONY: install lock upgrade demo test scenarios soak bench docs lint format clean

# `make install` installs exactly what uv.lock pins (every package, transitive ones included, with hashes),
# nothing newer: pip installs the locked uv (its hashes read from uv.lock), then uv installs the rest.
# `--locked` refuses a lock that no longer matches pyproject.toml instead of resolving anew.
# `--compile-bytecode` writes the .pyc files at install, as pip does by default and uv does not: without them
# every `harvest run` compiles Prefect's sources again where bytecode cannot be written (PYTHONDONTWRITEBYTECODE,
# a read-only install): ~1.4 s of a run's ~2.3 s start (docs/performance.md).
UV := $(BIN)/uv
UV_INSTALLED := $(VENV)/.uv-installed
UV_SYNC := UV_PYTHON_DOWNLOADS=never $(UV) sync --locked --quiet --compile-bytecode

install: $(STAMP)

# A stamp, not the uv binary, says uv is in place: an install cut short (Ctrl-C) can leave the binary empty, and
# make would take it as done and fail on it at every later run; `--force-reinstall` writes it whole again.
$(UV_INSTALLED): uv.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PYTHON) tools/lockfile.py uv-requirement uv.lock > $(VENV)/uv-requirement.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps --force-reinstall \
		-r $(VENV)/uv-requirement.txt
	$(BIN)/python -m pip uninstall -q -y setuptools  # the venv's seed; the lock's own comes with what needs it
	touch $(UV_INSTALLED)

$(STAMP): pyproject.toml uv.lock $(UV_INSTALLED)
	$(UV_SYNC) --extra dev
	$(BIN)/python -m compileall -q connectors tasks flows sandbox  # harvest's own modules (installed editable)
	$(BIN)/python -c 'from harvest.connectors.catalog.job_catalog import builtin; builtin()'  # its catalog, parsed
	touch $(STAMP)

# The newest DuckDB 1.x's wheel (tests/duckdb-1x-requirements.txt, hashes checked), for the test that opens a landed
# harvest.duckdb with it in a venv of its own: the tests send nothing but to 127.0.0.1, so `make test` fetches it
# first (`make demo` does not need it). Without the package index it is left out (that test then says so and
# skips); the next `make test` tries again.
$(DUCKDB1): tests/duckdb-1x-requirements.txt $(UV_INSTALLED)
	$(BIN)/python -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: --require-hashes \
		-d $(VENV)/duckdb-1x -r tests/duckdb-1x-requirements.txt && touch $(DUCKDB1) \
		|| echo "make test: the DuckDB 1.x wheel could not be fetched; tests/test_duckdb_storage.py will skip"

# After editing dependencies in pyproject.toml: pin what is new, keep every other pin.
lock: $(UV_INSTALLED)
	$(UV) lock

# Every package to the newest version pyproject.toml allows, what moved into CHANGELOG.md, then the suite.
upgrade: $(UV_INSTALLED)
	cp uv.lock $(VENV)/uv.lock.before
	$(UV) lock --upgrade
	$(BIN)/python tools/lockfile.py changes $(VENV)/uv.lock.before uv.lock --changelog CHANGELOG.md
	$(MAKE) test

demo: install
	$(BIN)/harvest demo

# Three workers by default (pytest-xdist) on two cores: most of a test waits on sandboxes, Prefect servers and
# harvest subprocesses, so a third worker fills the cores the other two leave idle. tests/conftest.py's scheduler
# runs a module with a module-scoped fixture whole on one worker (set up once), hands out the rest one test at a
# time and the longest modules first, so no worker ends the run alone with a queue the others could have taken.
TEST_WORKERS ?= 3

# `make test` is every test but the long ones: ~10 minutes on two cores. `make scenarios` runs those (tests marked
# `scenario`: harvest's processes killed, signalled, cut off and served at every moment, on every runner; each tens
# of seconds of both cores), one proof of each kind staying in `make test` (docs/decisions.md, The test suite).
test: install $(DUCKDB1)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m 'not soak and not bench and not scenario'

scenarios: install $(DUCKDB1)
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m 'scenario and not soak and not bench'

soak: install
	$(BIN)/python -m pytest -q -s -m soak tests/test_soak.py

bench: install
	$(UV_SYNC) --extra dev --extra bench
	$(BIN)/python bench/run.py

# The pages under docs/ as a browsable site in site/ (mkdocs.yml); --strict fails on a dead link or a page left out.
docs: install
	$(UV_SYNC) --extra dev --extra docs
	$(BIN)/mkdocs build --strict --site-dir site

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) data site .pytest_cache .mypy_cache .ruff_cache
