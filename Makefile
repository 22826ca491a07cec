PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make agent`'s extras: add a channel's or the browser's, e.g. `make agent EXTRAS=web,telegram`
EXTRAS ?= web
# made once the test extra (every channel's library, Playwright, pytest, ruff, mypy) is installed
DEV := $(VENV)/.dev-installed

BENCHES := size run memory_search recall locomo channels auto_recall peer web web_stream web_chat tool_policy spend browser acp_server mcp_serve soak

.PHONY: agent install test test-fast lint bench size screens clean

agent:  # nanoagent for a person who wants the agent: the core and web_fetch's extra (about 430 MB, under a minute)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"

install: $(DEV)  # everything the tests use (CI runs it; `make lint` and `make test` do too when it is missing)

$(DEV): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(DEV)

# workers: most tests wait (on a server, a process, a deadline) more than they compute, so four overlap those waits
# on two cores: make test-fast took 164 s with two, 120 s with three, 105 s with four (README, Development)
WORKERS ?= 4

test: $(DEV)
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

test-fast: $(DEV)  # the edit loop: in this process only (no tests marked `process`)
	$(BIN)/python -m pytest -n $(WORKERS) --dist worksteal -m "not process"

lint: $(DEV)
	$(BIN)/ruff check nanoagent tests bench scripts
	$(BIN)/mypy

bench: $(DEV)  # each script prints its figures against their budgets and exits non-zero past one
	@status=0; for b in $(BENCHES); do $(BIN)/python bench/$$b.py || status=1; done; exit $$status

screens: $(DEV)  # every page of the web app at a desktop's and a phone's width into docs/screens/ (scripts/screens.py)
	$(BIN)/python scripts/screens.py

size:  # the core's lines against its budget, then each plug-in folder's (bench/size.py)
	$(BIN)/python bench/size.py

clean:
	rm -rf $(VENV) dist build .pytest_cache .ruff_cache
