#!/usr/bin/env bash
# `make deps`: the Debian packages some tests drive — chromium (the browser tests), pgbouncer
# (the PgBouncer test) and pg_auto_failover (postgresql-15-auto-failover, pg-auto-failover-cli:
# the database-failover test and `make ha-up`) — installed with apt-get when missing. Needs root;
# without a package its tests skip and say why (and fail under CI=1).
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
# pg_autoctl lives in the server's bin directory; the CLI package adds /usr/bin/pg_autoctl.
pgbin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
major="$(basename "$(dirname "${pgbin:-/usr/lib/postgresql/15/bin}")")"
[ -e "/usr/lib/postgresql/$major/lib/pgautofailover.so" ] \
  || missing+=("postgresql-$major-auto-failover")
command -v pg_autoctl >/dev/null 2>&1 || missing+=(pg-auto-failover-cli)
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: chromium, pgbouncer and pg_auto_failover are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: install ${missing[*]} (apt-get install ${missing[*]}) as root; their tests skip" >&2
  exit 1
fi
echo "deps: installing Debian's ${missing[*]}"
timeout 600 apt-get update -qq
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}"
