# Two front doors: `make app` (set up, then run the app on the embedded demo data) and
# `make test` (set up, then run the tests). Each creates its own virtual environment.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8501
ADDRESS ?= 127.0.0.1

.PHONY: app test test-quick lint setup setup-dev bench clean

# The packages are installed by uv (from PyPI, into the venv) when it can be had: it fetches
# and unpacks them side by side. Where uv cannot be installed or fails, pip installs the same
# requirements. Then the installed modules' bytecode is written, but for the packages' own
# test suites and pip's and setuptools' code, which nothing here imports: 11 s on the 2-core
# machine where uv's --compile-bytecode of every module took 42 s (docs/development.md).
# This machine sets PYTHONDONTWRITEBYTECODE, so an import never writes bytecode and every
# process would compile a module without it again: the make targets run Python with it
# unset, so a module left out is compiled once, by the first process that imports it, into
# this venv or this checkout.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	-$(BIN)/python -m pip install --quiet "uv>=0.4,<1"

WRITE_BYTECODE = env -u PYTHONDONTWRITEBYTECODE
INSTALL = $(BIN)/python -m uv pip install --quiet --python $(BIN)/python $(1) \
	|| $(BIN)/python -m pip install --quiet $(1)
SITE_PACKAGES = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# (a file that does not compile is left to the import that needs it: the leading - goes on)
SITE_COMPILE = -$(BIN)/python -m compileall -q -j 0 -x '/tests?/|/site-packages/(pip|setuptools)/' \
	$(SITE_PACKAGES) > /dev/null

# pkps_core is installed editable (its dependencies are requirements.txt, through
# pyproject.toml), so `$(BIN)/python -m pkps_core` works from any folder.
$(VENV)/.runtime: requirements.txt pyproject.toml | $(BIN)/python
	$(call INSTALL,-e .)
	$(SITE_COMPILE)
	touch $@

$(VENV)/.dev: requirements-dev.txt requirements.txt pyproject.toml | $(BIN)/python
	$(call INSTALL,-r requirements-dev.txt -e .)
	$(SITE_COMPILE)
	touch $(VENV)/.runtime $@

setup: $(VENV)/.runtime
setup-dev: $(VENV)/.dev

app: $(VENV)/.runtime
	$(WRITE_BYTECODE) $(BIN)/python -m streamlit run app.py --server.address $(ADDRESS) --server.port $(PORT) \
		--browser.gatherUsageStats false

# the tests in two processes (pytest-xdist), each test file kept in one of them (its
# module-scoped fits are made once) and handed out in conftest.py's order (the slowest
# first); PYTEST_WORKERS=0 runs them in this process
PYTEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)
# this checkout's own modules compiled once (skipped when up to date): the tests start
# dozens of processes (app servers, commands), each of which would otherwise compile them
COMPILE = $(BIN)/python -m compileall -q pkps_core perspective_app bench tests app.py > /dev/null

# the whole suite; it ends with its slowest DURATIONS tests, so every run (CI's too) says
# where the time went (DURATIONS=0: every test's time)
DURATIONS ?= 20
test: $(VENV)/.dev
	$(COMPILE)
	$(WRITE_BYTECODE) $(BIN)/python -m pytest $(XDIST) --durations=$(DURATIONS)

# the quick loop: no browser tests and none marked slow (docs/development.md)
test-quick: $(VENV)/.dev
	$(COMPILE)
	$(WRITE_BYTECODE) $(BIN)/python -m pytest $(XDIST) -m "not slow and not browser"

lint: $(VENV)/.dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(VENV)/.dev
	$(WRITE_BYTECODE) $(BIN)/python -m bench

clean:
	rm -rf $(VENV)
