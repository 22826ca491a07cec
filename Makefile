PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

BENCHES := size run memory_search recall auto_recall peer web web_stream tool_policy spend browser

.PHONY: install test test-fast lint bench size clean

install:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"

test:
	$(BIN)/python -m pytest -n auto --dist worksteal

test-fast:  # the edit loop: in this process only (no tests marked `process`)
	$(BIN)/python -m pytest -n auto --dist worksteal -m "not process"

lint:
	$(BIN)/ruff check nanoagent tests bench
	$(BIN)/mypy

bench:  # each script prints its figures against their budgets and exits non-zero past one
	@status=0; for b in $(BENCHES); do $(BIN)/python bench/$$b.py || status=1; done; exit $$status

size:  # the core's lines against its budget, then each plug-in folder's (bench/size.py)
	$(BIN)/python bench/size.py

clean:
	rm -rf $(VENV) dist build .pytest_cache .ruff_cache
