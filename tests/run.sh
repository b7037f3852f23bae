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

# Two tests need Debian packages: the browser test (chromium) and the PgBouncer test (pgbouncer).
# Install the missing ones once when we may (root, apt). Non-fatal: without a package its test
# skips and says why. NO_APT_INSTALL=1 (or the older NO_CHROMIUM_INSTALL=1) skips this step.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
if [ ${#missing[@]} -gt 0 ] && [ -z "${NO_APT_INSTALL:-}${NO_CHROMIUM_INSTALL:-}" ] \
   && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "tests: installing Debian's ${missing[*]} for the tests that need them (once)" >&2
  if ! { timeout 600 apt-get update -qq \
         && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}"; } \
       >/tmp/test-packages-install.log 2>&1; then
    echo "tests: could not install ${missing[*]} (/tmp/test-packages-install.log):" \
         "their tests skip" >&2
  fi
fi
exec "$PY" -m pytest "$@"
