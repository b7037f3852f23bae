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

# The browser test drives Debian's Chromium: install it once when missing and we may (root, apt).
# Non-fatal: without it that test skips and says why. NO_CHROMIUM_INSTALL=1 skips this step.
if [ -z "${NO_CHROMIUM_INSTALL:-}" ] && ! command -v chromium >/dev/null 2>&1 \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tests: installing Debian's chromium for the browser test (once)" >&2
  if ! { timeout 600 apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq chromium; } \
       >/tmp/chromium-install.log 2>&1; then
    echo "tests: could not install chromium (/tmp/chromium-install.log): the browser test skips" >&2
  fi
fi
exec "$PY" -m pytest "$@"
