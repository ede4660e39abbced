# Two commands for a newcomer: `make run` (the main job) and `make test` (the whole suite).
# Each creates .venv when missing and installs the pinned requirements into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: run test test-slow lint format bench clean

$(STAMP): requirements.txt setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(PY) -m pip install -q -r requirements-test.txt
	touch $@

run: $(STAMP)
	$(PY) -m experiments.run_all --workdir runs/ladder

lint: $(TEST_STAMP)
	$(PY) -m ruff format --check jaxformer experiments tests colabs
	$(PY) -m ruff check jaxformer experiments tests colabs

format: $(TEST_STAMP)
	$(PY) -m ruff format jaxformer experiments tests colabs
	$(PY) -m ruff check --fix jaxformer experiments tests colabs

test: lint
	$(PY) -m pytest -n 2 --dist loadfile -q

test-slow: $(TEST_STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) -m experiments.bench all

clean:
	rm -rf $(VENV) runs
