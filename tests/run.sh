#!/usr/bin/env bash
# Runs the test suite against one database: TEST_DB=postgres|sqlite, or DATABASE_URL as given.
# A PostgreSQL run gets its own database name, so two runs never collide.
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

exec "$PY" -m pytest "$@"
