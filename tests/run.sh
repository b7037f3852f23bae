#!/usr/bin/env bash
# Runs the test suite against one database: TEST_DB=postgres|sqlite, or DATABASE_URL as given.
# A PostgreSQL run gets its own database name, so two runs never collide; each parallel worker
# then gets its own copy (pytest-django suffixes the name with the worker's id).
#
# With no arguments: every test the database allows, in two steps. First the tests not marked
# `serial`, spread over TEST_WORKERS processes (pytest-xdist; default 4: most tests wait on
# processes, sockets and the database rather than compute), then the `serial` ones (latency
# bounds; a restart of the shared PostgreSQL) alone. With arguments: one pytest run, as given.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

if [ -z "${DATABASE_URL:-}" ]; then
  case "${TEST_DB:-auto}" in
    postgres) pg_up || { echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2; exit 1; }
              use_pg=1 ;;
    sqlite)   use_pg=0 ;;
    *)        if pg_up; then use_pg=1; else use_pg=0; fi ;;
  esac
  if [ "$use_pg" = 1 ]; then
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/broker_$(date +%s)_$$"
    echo "tests: PostgreSQL (${DATABASE_URL##*/}; pytest-django adds the test_ prefix)"
  else
    export DATABASE_URL="sqlite:///$(mktemp -d)/broker.sqlite3"
    echo "tests: SQLite (PostgreSQL-only tests skip)"
  fi
fi
export DEBUG="${DEBUG:-False}" SECRET_KEY="${SECRET_KEY:-test-only-secret-key}"
# A run starts some 200 Python processes (gunicorn, sweepers, workers); with bytecode not cached
# (PYTHONDONTWRITEBYTECODE, set on these machines) each compiled the project again, 0.17 s of
# CPU a start, and each pytest process rewrote every test module. Cached in __pycache__
# (ignored by git), compiled once here.
unset PYTHONDONTWRITEBYTECODE
"$PY" -m compileall -q broker workers queueproject contract manage.py gunicorn.conf.py >/dev/null

if [ $# -gt 0 ]; then
  exec "$PY" -m pytest "$@"
fi

started=$SECONDS
status=0
echo "tests: the parallel part, ${TEST_WORKERS:-4} workers"
"$PY" -m pytest -n "${TEST_WORKERS:-4}" --dist worksteal -m "not serial" || status=$?
echo "tests: the serial part, alone"
# Only the modules that mark tests serial: collecting all of them again took 7 s.
mapfile -t serial_modules < <(grep -rlE --include='test_*.py' 'mark\.serial' tests | sort)
"$PY" -m pytest -m serial "${serial_modules[@]}" || { s=$?; [ "$s" = 5 ] || status=$s; }  # 5: none
elapsed=$((SECONDS - started))
printf 'tests: %d min %02d s in all; %s\n' $((elapsed / 60)) $((elapsed % 60)) \
  "$([ "$status" = 0 ] && echo passed || echo FAILED)"
exit "$status"
