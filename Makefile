# The two commands a newcomer needs: `make demo` and `make test`. Both set up .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
export SHOPDISTILL_HOME ?= $(CURDIR)/.shopdistill

.PHONY: setup demo test dev validate clean browser env

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=25,<26"
	# torch first, pinned: the CPU wheel on local disk. Unpinned, pip pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[train,dev,deploy]"
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

demo: setup
	$(BIN)/shopdistill demo

validate: setup
	$(BIN)/python -m pip check
	$(BIN)/dagster definitions validate -w workspace.yaml
	$(BIN)/dg check defs

test: validate
	$(BIN)/python -m pytest -q

# The UI and the daemon (sensors, schedule, automation, backfills) on the local instance. Roots come
# from the SHOPDISTILL_* variables exactly as for the CLI (`.venv/bin/shopdistill env` prints them).
# One `make dev` per project home: a second one fails here instead of starting a second daemon on the
# same instance, or a UI on another port (the port is given, so Dagster never picks another).
DEV_PORT ?= 3000
DEV_LOCK = $(SHOPDISTILL_HOME)/dagster/.make-dev.lock
dev: setup
	mkdir -p $(SHOPDISTILL_HOME)/dagster
	test -f $(SHOPDISTILL_HOME)/dagster/dagster.yaml || cp dagster.yaml $(SHOPDISTILL_HOME)/dagster/dagster.yaml
	@$(BIN)/python -c "import socket, sys; s = socket.socket(); busy = s.connect_ex(('127.0.0.1', $(DEV_PORT))) == 0; \
	sys.exit('make dev: 127.0.0.1:$(DEV_PORT) is already in use (a make dev already running? its UI is at http://127.0.0.1:$(DEV_PORT)); stop it, or choose another port: make dev DEV_PORT=3001' if busy else 0)"
	@DAGSTER_HOME=$(SHOPDISTILL_HOME)/dagster flock -n -E 75 $(DEV_LOCK) $(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p $(DEV_PORT) \
	|| { rc=$$?; if [ $$rc -eq 75 ]; then echo "make dev: another make dev already runs on $(SHOPDISTILL_HOME) (one daemon per instance): stop it first" >&2; fi; exit $$rc; }

env: setup
	$(BIN)/shopdistill env

# Debian's chromium for the UI test (tests/test_ui.py); Playwright only drives it.
browser:
	test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

clean:
	rm -rf $(SHOPDISTILL_HOME) .pytest_cache
