#!/usr/bin/env bash
# `make deps`: the Debian packages some tests drive — chromium (the browser tests) and pgbouncer
# (the PgBouncer test) — installed with apt-get when missing. Needs root; without a package its
# tests skip and say why.
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: chromium and pgbouncer are installed"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: install ${missing[*]} (apt-get install ${missing[*]}) as root; their tests skip" >&2
  exit 1
fi
echo "deps: installing Debian's ${missing[*]}"
timeout 600 apt-get update -qq
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq "${missing[@]}"
