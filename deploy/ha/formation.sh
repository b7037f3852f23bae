#!/usr/bin/env bash
# A local, highly available PostgreSQL for the broker: a pg_auto_failover formation built from
# nothing — one monitor and three data nodes (node1..node3) with number_sync_standbys=1 — on
# loopback, with short failover timers. `make ha-up` / `make ha-down` call it; so does the
# database-failover fault test (tests/faults/test_database_failover.py).
#
#   formation.sh up            build and start it; prints DATABASE_URL=... (also in $HA_DIR/env)
#   formation.sh down          kill every process of it and delete $HA_DIR
#   formation.sh url           the DATABASE_URL
#   formation.sh state         pg_autoctl show state (add --json for JSON)
#   formation.sh primary       the name of the node that is primary now (node1..node3)
#   formation.sh wait-healthy  wait until one primary and two secondaries (HA_WAIT_S, 120 s)
#   formation.sh kill NODE     kill -9 every process of NODE (pg_autoctl and PostgreSQL)
#   formation.sh start NODE    run NODE again (a killed primary rejoins as a secondary)
#
# Environment: HA_DIR (default ${TMPDIR:-/tmp}/broker-ha-$(id -un)), HA_PORT (the monitor's port;
# the nodes take the next three; default: a free block of four in HA_PORT_RANGE, "55400 55499"),
# HA_DB (broker).
# Needs Debian's postgresql-15-auto-failover and pg-auto-failover-cli (`make deps`). pg_autoctl
# refuses to run as root: as root, everything runs as the postgres user.
#
# Timers (pg_auto_failover's defaults in brackets) and what they trade:
#   monitor  health_check_period 1000 ms [5000], health_check_timeout 1000 ms [5000],
#            health_check_max_retries 1 [2], health_check_retry_delay 500 ms [2000]:
#              the monitor notices a dead primary in ~2 s instead of ~15 s, at the price of a
#              connection to every node every second;
#            node_considered_unhealthy_timeout 2000 ms [20000]: a primary whose keeper has not
#              reported for 2 s and that fails its health check is failed over; a primary that
#              stalls for 2 s under load (a long fsync, swapping) can be failed over too;
#            primary_demote_timeout 4000 ms [30000]: how long the standby waits, before taking
#              writes, for a primary that may still be alive (a network partition) to demote
#              itself; it must stay above the keepers' network_partition_timeout;
#            startup_grace_period 2000 ms [10000]: no failover this soon after the monitor starts.
#   keepers  timeout.network_partition_timeout 3 s [20]: a primary that reaches neither the
#              monitor nor a standby for 3 s stops taking writes (against split brain).
# With these a kill -9 of the primary costs about 10 s of writes on this machine
# (docs/failure-semantics.md has the measured figures); with the defaults, about 40-50 s.
set -Eeuo pipefail

HA_DB="${HA_DB:-broker}"
HA_DIR="${HA_DIR:-${TMPDIR:-/tmp}/broker-ha-$(id -un)}"
NODES=(node1 node2 node3)
read -r -a PORT_RANGE <<<"${HA_PORT_RANGE:-55400 55499}"

die() { echo "formation: $*" >&2; exit 1; }

pgbin() {
  local bin
  bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [ -n "$bin" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql"
  echo "$bin"
}

check_tools() {
  command -v pg_autoctl >/dev/null 2>&1 \
    || die "pg_autoctl not found: install pg-auto-failover-cli and postgresql-15-auto-failover (make deps)"
  local major
  major="$(basename "$(dirname "$(pgbin)")")"
  [ -e "/usr/lib/postgresql/$major/lib/pgautofailover.so" ] \
    || die "the pgautofailover extension is missing: install postgresql-$major-auto-failover (make deps)"
}

# pg_autoctl and PostgreSQL run as the postgres user when we are root (both refuse root), with
# their configuration, state and pid files inside $HA_DIR, so `down` leaves nothing behind.
as_pg() {
  local envs=(env "PATH=$(pgbin):/usr/bin:/bin" "HOME=$HA_DIR" "XDG_CONFIG_HOME=$HA_DIR/config"
              "XDG_DATA_HOME=$HA_DIR/share" "XDG_RUNTIME_DIR=$HA_DIR/run" "TMPDIR=$HA_DIR/run")
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid postgres --regid postgres --init-groups "${envs[@]}" "$@"
  else
    "${envs[@]}" "$@"
  fi
}

pg_user() { if [ "$(id -u)" = 0 ]; then echo postgres; else id -un; fi; }

# Free: nothing listens on it and no socket uses it as its local port. The range lies inside
# Linux's ephemeral ports, so a client connection may hold one; binding it would then fail.
port_free() {
  local port=$1
  [ -z "$(ss -Htan "( sport = :$port )" 2>/dev/null)" ] \
    && [ ! -e "/var/run/postgresql/.s.PGSQL.$port" ] && [ ! -e "/tmp/.s.PGSQL.$port" ]
}

# Four consecutive free ports, from a random start, so that two formations on one machine (two
# test runs) rarely try the same block.
pick_port() {
  local span=$((PORT_RANGE[1] - PORT_RANGE[0] - 3)) start base ok i
  start=$((RANDOM % span))
  for ((n = 0; n < span; n++)); do
    base=$((PORT_RANGE[0] + (start + n) % span))
    ok=1
    for i in 0 1 2 3; do port_free $((base + i)) || { ok=0; break; }; done
    [ "$ok" = 1 ] && { echo "$base"; return; }
  done
  die "no four free consecutive ports in ${PORT_RANGE[0]}-${PORT_RANGE[1]}"
}

monitor_port() { cat "$HA_DIR/port"; }
node_port() { echo $(($(monitor_port) + ${1#node})); }
monitor_uri() { echo "postgres://autoctl_node@127.0.0.1:$(monitor_port)/pg_auto_failover?sslmode=disable"; }

database_url() {
  local hosts=() node
  for node in "${NODES[@]}"; do hosts+=("127.0.0.1:$(node_port "$node")"); done
  local joined
  joined="$(IFS=,; echo "${hosts[*]}")"
  echo "postgresql://$(pg_user)@$joined/$HA_DB?target_session_attrs=read-write&connect_timeout=2"
}

# `pg_autoctl run` in a session of its own, detached; its output in $HA_DIR/<name>.log.
run_node() {
  local name=$1
  # Without `up`'s ERR trap or its stderr (fd 3): a node killed later is no failure of `up`,
  # and a caller reading `up`'s output to its end must not wait for the nodes.
  (trap - ERR; as_pg setsid pg_autoctl run --pgdata "$HA_DIR/$name") \
    >>"$HA_DIR/$name.log" 2>&1 </dev/null 3>&- &
  disown
}

sql_monitor() {
  psql -X -q -h 127.0.0.1 -p "$(monitor_port)" -U "$(pg_user)" -d pg_auto_failover -v ON_ERROR_STOP=1 "$@"
}

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local seconds=$1 what=$2
  shift 2
  local end=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out after ${seconds}s waiting for $what (logs: $HA_DIR/*.log)"
    sleep 0.2
  done
}

states() {  # one line per node: "name reported assigned"
  as_pg pg_autoctl show state --pgdata "$HA_DIR/monitor" --json 2>/dev/null | python3 -c '
import json, sys
for n in json.load(sys.stdin):
    print(n["nodename"], n["current_group_state"], n["assigned_group_state"])'
}

# pg_autoctl create resumes an interrupted init when run again: a node whose create failed
# (its monitor busy, a transient state) gets two more tries; the last one's failure stops `up`.
create_node() {
  local node=$1 pgctl=$2 try
  local create=(pg_autoctl create postgres --pgdata "$HA_DIR/$node" --pgport "$(node_port "$node")"
                --pgctl "$pgctl" --listen 127.0.0.1 --hostname 127.0.0.1 --name "$node"
                --dbname "$HA_DB" --monitor "$(monitor_uri)" --auth trust --no-ssl)
  for try in 1 2; do
    as_pg "${create[@]}" >>"$HA_DIR/$node.log" 2>&1 && return 0
    echo "formation: creating $node failed (exit $?), try $try of 3" | tee -a "$HA_DIR/$node.log" >&2
    sleep 2
  done
  as_pg "${create[@]}" >>"$HA_DIR/$node.log" 2>&1
}

# N nodes registered, each in the state the monitor assigned it, none of them still joining.
settled() {
  local lines
  lines="$(states)" || return 1
  [ "$(wc -l <<<"$lines")" = "$1" ] \
    && ! awk '$2 != $3 || $2 !~ /^(single|primary|secondary)$/ {bad = 1} END {exit !bad}' <<<"$lines"
}

healthy() {
  local lines
  lines="$(states)" || return 1
  [ "$(grep -c ' primary primary$' <<<"$lines")" = 1 ] \
    && [ "$(grep -c ' secondary secondary$' <<<"$lines")" = $((${#NODES[@]} - 1)) ]
}

cmd_up() {
  check_tools
  [ ! -e "$HA_DIR/port" ] || die "already up in $HA_DIR ($(database_url)); formation.sh down first"
  mkdir -p "$HA_DIR/run" "$HA_DIR/config" "$HA_DIR/share"
  [ "$(id -u)" != 0 ] || chown -R postgres: "$HA_DIR"
  local base pgctl
  base="${HA_PORT:-$(pick_port)}"
  echo "$base" >"$HA_DIR/port"
  pgctl="$(pgbin)/pg_ctl"
  # What failed, and the logs' ends, on the caller's stderr (fd 3): a failing command inside a
  # function whose output goes to a log would otherwise report into that log only.
  exec 3>&2
  trap 'status=$?; echo "formation: up failed (exit $status): $BASH_COMMAND" >&3
        for log in "$HA_DIR"/*.log; do echo "== $log" >&3; tail -n 15 "$log" >&3 2>/dev/null; done
        echo "formation: formation.sh down removes what was made" >&3' ERR
  echo "formation: monitor on 127.0.0.1:$base, data nodes on $((base + 1))-$((base + 3)), in $HA_DIR" >&2

  as_pg pg_autoctl create monitor --pgdata "$HA_DIR/monitor" --pgport "$base" --pgctl "$pgctl" \
    --hostname 127.0.0.1 --auth trust --no-ssl >>"$HA_DIR/monitor.log" 2>&1
  as_pg pg_autoctl config set --pgdata "$HA_DIR/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
  run_node monitor
  wait_for 60 "the monitor" sql_monitor -c "SELECT 1"
  sql_monitor <<'SQL'
ALTER SYSTEM SET pgautofailover.health_check_period = 1000;
ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000;
ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1;
ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500;
ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 2000;
ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 4000;
ALTER SYSTEM SET pgautofailover.startup_grace_period = 2000;
SELECT pg_reload_conf() \gset
SQL

  local node created=0
  for node in "${NODES[@]}"; do
    create_node "$node" "$pgctl"
    as_pg pg_autoctl config set --pgdata "$HA_DIR/$node" timeout.network_partition_timeout 3 >/dev/null
    run_node "$node"
    created=$((created + 1))
    # One node joins at a time: a standby created while the last one is still settling (its
    # base backup, the primary's move to wait_primary) can fail on a loaded machine.
    wait_for "${HA_WAIT_S:-120}" "$node to join" settled "$created"
  done
  wait_for "${HA_WAIT_S:-120}" "one primary and two secondaries" healthy
  # pg_autoctl 2.0's `set formation number-sync-standbys` refuses every number: the function.
  sql_monitor -At -c "SELECT pgautofailover.set_formation_number_sync_standbys('default', 1)" \
    >/dev/null
  wait_for "${HA_WAIT_S:-120}" "the primary to apply it" healthy
  echo "DATABASE_URL=$(database_url)" >"$HA_DIR/env"
  echo "DATABASE_URL=$(database_url)"
}

# Every process of a node: its pg_autoctl session (supervisor, keeper, postgres controller) and
# the postmaster's children, which PostgreSQL puts in sessions of their own; not zombies.
node_pids() {
  pids_of "$1" "$(node_sid "$1")"
}

node_sid() {  # the session of the node's pg_autoctl, or -1
  local dir="$HA_DIR/$1" sid="" pidfile
  for pidfile in "$HA_DIR"/run/pg_autoctl"$dir"/pg_autoctl.pid; do
    [ -f "$pidfile" ] && sid="$(ps -o sid= -p "$(head -1 "$pidfile")" 2>/dev/null | tr -d ' ')"
  done
  echo "${sid:--1}"
}

pids_of() {  # pids_of NODE SID
  local dir="$HA_DIR/$1" postmaster=""
  [ -f "$dir/postmaster.pid" ] && postmaster="$(head -1 "$dir/postmaster.pid")"
  ps -eo pid=,ppid=,sid=,stat= | awk -v s="$2" -v p="${postmaster:--1}" \
    '$4 !~ /^Z/ && ((s != -1 && $3 == s) || (p != -1 && ($2 == p || $1 == p))) {print $1}'
}

cmd_kill() {
  local node=${1:?kill NODE}
  [ -d "$HA_DIR/$node" ] || die "no node $node in $HA_DIR"
  local sid pids tries=0
  sid="$(node_sid "$node")"
  pids="$(pids_of "$node" "$sid" | tr '\n' ' ')"
  [ -n "${pids// }" ] || die "$node is not running"
  # pg_autoctl's session as one process group first: killed one pid after another, its
  # supervisor outlived its children long enough to start them again, PostgreSQL with them, and
  # the node was back at once (seen in CI). Then whatever is left (the postmaster, in a session
  # of its own, and its children), again until nothing is.
  [ "$sid" = -1 ] || kill -9 -- "-$sid" 2>/dev/null || true
  while [ -n "${pids// }" ]; do
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    tries=$((tries + 1))
    [ "$tries" -le 250 ] || die "$node still has processes after 250 kills: $pids"
    sleep 0.02
    pids="$(pids_of "$node" "$sid" | tr '\n' ' ')"
  done
  echo "formation: killed $node" >&2
}

cmd_start() {
  local node=${1:?start NODE}
  [ -d "$HA_DIR/$node" ] || die "no node $node in $HA_DIR"
  [ -z "$(node_pids "$node")" ] || die "$node is running"
  run_node "$node"
}

alive() {  # a process that exists and is not a zombie
  local stat
  stat="$(ps -o stat= -p "$1" 2>/dev/null || true)"
  [ -n "$stat" ] && [ "${stat:0:1}" != Z ]
}

# A PostgreSQL killed with -9 leaves its socket and lock file in the socket directory; the lock
# names the postmaster's pid: remove them once that process is gone.
remove_stale_sockets() {
  local port lock pid
  for port in "$@"; do
    for lock in /var/run/postgresql/.s.PGSQL."$port".lock /tmp/.s.PGSQL."$port".lock; do
      [ -f "$lock" ] || continue
      pid="$(head -1 "$lock" 2>/dev/null || true)"
      if [ -n "$pid" ] && ! alive "$pid"; then
        rm -f "$lock" "${lock%.lock}"
      fi
    done
  done
}

cmd_down() {
  if [ -e "$HA_DIR/port" ]; then
    local pids="" node base
    for node in "${NODES[@]}" monitor; do
      [ -d "$HA_DIR/$node" ] && pids+=" $(node_pids "$node" | tr '\n' ' ')"
    done
    # shellcheck disable=SC2086
    [ -z "${pids// }" ] || kill -9 $pids 2>/dev/null || true
    base="$(monitor_port)"
    local pid
    for pid in $pids; do  # gone, or zombies: up to 5 s
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    done
    remove_stale_sockets "$base" $((base + 1)) $((base + 2)) $((base + 3))
  fi
  rm -rf "$HA_DIR"
  echo "formation: down ($HA_DIR removed)" >&2
}

cmd_primary() {
  states | awk '$3 == "primary" || $3 == "wait_primary" {print $1; found = 1} END {exit !found}'
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  url) [ -e "$HA_DIR/port" ] || die "not up ($HA_DIR)"; database_url ;;
  state) shift; as_pg pg_autoctl show state --pgdata "$HA_DIR/monitor" "$@" ;;
  primary) cmd_primary ;;
  wait-healthy) wait_for "${HA_WAIT_S:-120}" "one primary and two secondaries" healthy ;;
  kill) cmd_kill "${2:-}" ;;
  start) cmd_start "${2:-}" ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
