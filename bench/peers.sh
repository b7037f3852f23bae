#!/usr/bin/env bash
# make bench-peers: our broker and the peers (Celery, PGQueuer, Procrastinate) measured by the
# shared harness (../shared/peers-bench) in one run on this machine, so the ratios compare.
# ONLY=regex picks peers (default: the goals' peers: Celery prefork and threads, PGQueuer);
# ROUNDS=3; BENCH_N=5000. TOKEN=1: every request of the broker's clients (runworker included)
# carries a database access token with every grant (docs/tenants.md), the API closed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SRC=$ROOT/../shared/peers-bench
WORK=${BENCH_PEERS_DIR:-/tmp/peers-bench}
[ -d "$WORK" ] || cp -r "$SRC" "$WORK"
chmod -R u+w "$WORK"
(cd "$WORK" && ./setup.sh)

DB=bench_broker_$(date +%s)_$$
createdb -h 127.0.0.1 -U postgres "$DB"
export DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB DEBUG=False ALLOWED_HOSTS=127.0.0.1 \
       SECRET_KEY=bench-only LOG_LEVEL=WARNING
.venv/bin/python manage.py migrate --noinput -v0
if [ "${TOKEN:-0}" = 1 ]; then
  secret=$(.venv/bin/python manage.py createtoken bench --grant all:'*' 2>/dev/null)
  export BENCH_BROKER_TOKEN=$secret BROKER_API_TOKEN=$secret
fi
PORT=${BENCH_PORT:-8100}
.venv/bin/gunicorn -b 127.0.0.1:$PORT & WEB=$!
.venv/bin/python manage.py runsweeper & SWEEPER=$!
cleanup() {
  kill -INT $WEB 2>/dev/null || true   # gunicorn's quick shutdown
  kill $SWEEPER 2>/dev/null || true
  wait $WEB $SWEEPER 2>/dev/null || true
  dropdb -h 127.0.0.1 -U postgres --force "$DB" || true
}
trap cleanup EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.2; done

BENCH_BROKER_URL=http://127.0.0.1:$PORT BENCH_BROKER_PROJECT=$ROOT BENCH_BROKER_PYTHON=$ROOT/.venv/bin/python \
ONLY=${ONLY:-'broker|celery_peer.py|pgqueuer_peer.py unlimited'} \
  "$WORK/run_all.sh"
mkdir -p bench-out
cp "$WORK/out/table.md" bench-out/peers-table.md
cp "$WORK/out/results.jsonl" bench-out/peers-results.jsonl
echo "(table in bench-out/peers-table.md)"
