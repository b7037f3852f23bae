# The README's two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)

.PHONY: run test test-slow test-pg test-sqlite deps lint fmt bench bench-parked bench-parked-burst bench-peers venv ha-up ha-down

venv: $(STAMP)

$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv (pinned in requirements-dev.txt) installs in ~10 s what pip took ~50 s of CPU for, a
	@# sixth of `make test` in a fresh clone; pip stays the way if uv cannot be had.
	$(PY) -m pip install --disable-pip-version-check -q "$$(grep '^uv==' requirements-dev.txt)" \
	  && UV_NATIVE_TLS=1 $(VENV)/bin/uv pip install --python $(PY) --compile-bytecode -q \
	    -r requirements-dev.txt \
	  || $(PY) -m pip install --disable-pip-version-check -q -r requirements-dev.txt
	rm -f $(VENV)/.installed-*
	touch $@

# The broker on :8080 (gunicorn.conf.py) and the sweeper, in the foreground (queueproject/
# devserver.py): it prints the address to open once the broker listens; Ctrl-C stops both and
# ends make with status 0. Development mode unless the environment says otherwise: DEBUG on (so
# the public dev SECRET_KEY), listening on loopback only, since the API is open and DEBUG pages
# show internals.
run: export DEBUG ?= True
run: export BROKER_BIND ?= 127.0.0.1:8080
run: export LOG_LEVEL ?= INFO
run: $(STAMP)
	$(PY) manage.py migrate --noinput
	@exec $(PY) -m queueproject.devserver

# Every test the database allows: DATABASE_URL if set, else a fresh database on the local
# PostgreSQL when one answers, else SQLite (PostgreSQL-only tests then skip, saying why). In
# parallel, then the `serial` tests alone (tests/run.sh); the time printed includes the virtualenv.
test:
	@SECONDS=0; $(MAKE) --no-print-directory venv && bash tests/run.sh; status=$$?; \
	echo "make test: $$((SECONDS / 60)) min $$((SECONDS % 60)) s, virtualenv included"; exit $$status

# The slow tests alone, one at a time: a restart of the local PostgreSQL, the failover of a
# formation, every connection cut, a sweeper killed mid-batch, kill -9 of workers and broker
# under load, 1000 parked long-polls, the schema fuzz
# of every operation, admin at scale;
# .ci/run runs them after `make test` on PostgreSQL.
test-slow:
	@SECONDS=0; $(MAKE) --no-print-directory venv && RUN_SLOW=1 bash tests/run.sh -m slow; \
	status=$$?; echo "make test-slow: $$((SECONDS / 60)) min $$((SECONDS % 60)) s"; exit $$status

# System packages the browser, PgBouncer and failover tests drive (root, apt); .ci/run calls it.
deps:
	@bash tests/deps.sh

# A local highly available PostgreSQL (pg_auto_failover: a monitor and three data nodes, after
# `make deps`); prints the DATABASE_URL to use. HA_DIR, HA_PORT: see deploy/ha/formation.sh.
ha-up:
	@bash deploy/ha/formation.sh up

ha-down:
	@bash deploy/ha/formation.sh down

test-pg:
	@TEST_DB=postgres $(MAKE) --no-print-directory test

test-sqlite:
	@TEST_DB=sqlite $(MAKE) --no-print-directory test

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

# One node (gunicorn.conf.py, 2 processes) holding N parked long-polls (default 10 000; N=...):
# its CPU and memory while they wait, /healthz, enqueue and wake latency (docs/operations.md).
bench-parked: $(STAMP)
	$(PY) bench/parked.py $(N)

# The same node and N polls sent as a burst (as after a deploy), probed on new connections too,
# each sample printed; HOG=1 runs a CPU hog on each core meanwhile (docs/operations.md).
bench-parked-burst: $(STAMP)
	BENCH_PARKED_HOG=$(HOG) $(PY) bench/parked_burst.py $(N)

# Our broker beside Celery and PGQueuer (ONLY=... for others), measured by ../shared/peers-bench in one run.
bench-peers: $(STAMP)
	bash bench/peers.sh
