# The README's two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: run test test-pg test-sqlite deps lint fmt bench bench-peers venv

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	rm -f $(VENV)/.installed-*
	touch $@

# The broker on :8080 (gunicorn.conf.py) and the sweeper, in the foreground; Ctrl-C stops both.
# Development mode unless the environment says otherwise: DEBUG on (so the public dev SECRET_KEY),
# listening on loopback only, since the API is open and DEBUG pages show internals.
run: export DEBUG ?= True
run: export BROKER_BIND ?= 127.0.0.1:8080
run: export LOG_LEVEL ?= INFO
run: $(STAMP)
	$(PY) manage.py migrate --noinput
	@trap 'kill $$SWEEPER $$WEB 2>/dev/null; wait' INT TERM EXIT; \
	$(PY) manage.py runsweeper & SWEEPER=$$!; \
	$(VENV)/bin/gunicorn & WEB=$$!; \
	wait -n $$SWEEPER $$WEB

# Every test the database allows: DATABASE_URL if set, else a fresh database on the local
# PostgreSQL when one answers, else SQLite (PostgreSQL-only tests then skip, saying why).
test: $(STAMP)
	@bash tests/run.sh

# System packages the browser and PgBouncer tests drive (root, apt); .ci/run calls it.
deps:
	@bash tests/deps.sh

test-pg: $(STAMP)
	@TEST_DB=postgres bash tests/run.sh

test-sqlite: $(STAMP)
	@TEST_DB=sqlite bash tests/run.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

fmt: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Throughput and wake-up latency on a fresh PostgreSQL database (not a test; prints a table).
bench: $(STAMP)
	$(PY) bench/bench.py

# Our broker beside Celery, PGQueuer and Procrastinate, measured by ../shared/peers-bench in one run.
bench-peers: $(STAMP)
	bash bench/peers.sh
