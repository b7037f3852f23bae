"""Every environment variable the bundled project reads, with its default and meaning: the one
source of docs/settings.md's table (tests/unit/test_settings_reference.py keeps the two equal,
and fails on a variable the code reads that is not here, or one here that nothing reads).

Regenerate the table with `python -c "from queueproject.settings_reference import
markdown_table; print(markdown_table(), end='')"`.
"""

from __future__ import annotations

from typing import NamedTuple


class Setting(NamedTuple):
    names: tuple[str, ...]  # one row for settings that go together
    default: str  # as a user would write it, in Markdown
    meaning: str  # Markdown; links relative to docs/


ENVIRONMENT: tuple[Setting, ...] = (
    Setting(
        ("DATABASE_URL",),
        "`sqlite:///db.sqlite3` (in the repo root)",
        (
            "`postgres://...` in production; a multi-host URL "
            "(`postgresql://u@h1:p1,h2:p2,h3:p3/db?target_session_attrs=read-write&connect_timeout=2`)"
            " follows a failover of a highly available PostgreSQL "
            "([high-availability.md](high-availability.md)); without a connect timeout a "
            "vanished host stalls each connection attempt for minutes"
        ),
    ),
    Setting(
        ("BROKER_API_TOKENS",),
        "empty (open)",
        (
            "comma-separated bearer tokens with every right; when set (or once an access token "
            "exists in the database: [tenants.md](tenants.md)), every API call but `/healthz` "
            "and `/` needs `Authorization: Bearer <token>` (`/sqs` needs a signature instead)"
        ),
    ),
    Setting(
        ("BROKER_SQS_CREDENTIALS",),
        "empty",
        (
            "`key_id:secret,...`: the access keys that may sign `/sqs` requests (SigV4) while"
            " `BROKER_API_TOKENS` is set; a malformed entry stops the process at start"
        ),
    ),
    Setting(
        ("BROKER_SWEEP_INTERVAL_MS",),
        "250",
        "the sweeper's tick (`runsweeper --interval-ms` overrides)",
    ),
    Setting(
        ("BROKER_RETRY_BASE_MS", "BROKER_RETRY_MAX_MS"),
        "1000 / 30000",
        "retry backoff",
    ),
    Setting(
        ("BROKER_OUTAGE_GRACE_MS",),
        "15000",
        (
            "a sweeper back after losing the database does not reclaim the leases that ended "
            "meanwhile until this long after: their workers settle them first "
            "([high-availability.md](high-availability.md#the-database-fails-over)); keep it "
            "above the workers' retry backoff cap (5 s) plus a request's time"
        ),
    ),
    Setting(
        ("BROKER_MAX_BODY_BYTES",),
        "262144",
        (
            "request body limit (413 above it; `/sqs` takes a full-size SQS message, 1 MiB, "
            "whatever it says); workers read it too, to nack a result too large to ack"
        ),
    ),
    Setting(
        ("BROKER_RETENTION",),
        "`7d`",
        (
            "done and cancelled tasks older than this are pruned by the sweeper (seconds, or "
            "`90s`, `15m`, `12h`, `7d`; `0` keeps them); dead tasks are never pruned, nor a "
            "task that a live or dead task names in `after`, nor the steps of a workflow not "
            "yet over ([failure-semantics.md](failure-semantics.md#retention))"
        ),
    ),
    Setting(
        ("BROKER_EVENT_RETENTION",),
        "`7d`",
        (
            "received events are kept this long (seconds, or `90s`, `15m`, `12h`, `7d`; `0` "
            "keeps them), so a wait made after its event still matches it "
            "([events.md](events.md))"
        ),
    ),
    Setting(
        ("BROKER_MAX_SCHEDULES",),
        "10000",
        (
            "how many schedules may exist; `POST /schedules` past it is a 400 "
            "([schedules.md](schedules.md)); `0`: none may be made"
        ),
    ),
    Setting(
        ("SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"),
        (
            "`DEBUG` off, no key, localhost only (`make run`: `DEBUG=True`, which brings a "
            "public dev key)"
        ),
        (
            "with `DEBUG` off the web server refuses to start without `SECRET_KEY`; workers "
            "and `manage.py` commands do not need one"
        ),
    ),
    Setting(
        ("BROKER_HTTPS",),
        "off",
        (
            "production behind TLS: secure cookies, https redirect (not `/healthz`), HSTS "
            "([production.md](production.md#production-mode-and-tls))"
        ),
    ),
    Setting(
        (
            "SECURE_SSL_REDIRECT",
            "SECURE_HSTS_SECONDS",
            "SECURE_HSTS_INCLUDE_SUBDOMAINS",
            "SECURE_HSTS_PRELOAD",
        ),
        "as `BROKER_HTTPS` / a year with it, else 0 / on / off",
        "Django's own, each on its own; `BROKER_HTTPS` sets the first two",
    ),
    Setting(
        ("CSRF_TRUSTED_ORIGINS",),
        "empty",
        (
            "Django's own, comma-separated: the `https://` origins admin's forms may be posted "
            "from when a proxy in front changes the host"
        ),
    ),
    Setting(
        ("LOG_LEVEL",),
        "`WARNING` (`make run`: `INFO`)",
        "root log level; INFO adds a line per request and per state change",
    ),
    Setting(
        ("BROKER_DB_POOL_MIN", "BROKER_DB_POOL_MAX", "BROKER_DB_POOL_TIMEOUT"),
        "2 / 16 / 8 s",
        (
            "PostgreSQL connection pool per broker process; a request waits up to the timeout"
            " for a connection, then answers 503"
        ),
    ),
    Setting(
        ("BROKER_DB_RECONNECT_MS",),
        "200",
        (
            "after losing PostgreSQL (a restart, a failover), how often each process (its "
            "pool and its `LISTEN` connection) tries to reconnect: writes resume within about"
            " this of the primary taking writes again "
            "([high-availability.md](high-availability.md)); also how often a parked claim "
            "woken for its queue looks again after a look that found no connection"
        ),
    ),
    Setting(
        ("BROKER_DB_PREPARE",),
        "on",
        ("prepared hot statements (server-side binding); off behind PgBouncer in transaction mode"),
    ),
    Setting(
        ("BROKER_DB_HEALTH_CHECKS",),
        "on",
        (
            "check a pooled connection before use (a syscall; a round trip only when the "
            "socket shows trouble)"
        ),
    ),
    Setting(
        ("BROKER_LISTEN_DATABASE_URL",),
        "empty (= `DATABASE_URL`)",
        (
            "where the `LISTEN` connection goes: a direct connection when queries go through "
            "PgBouncer"
        ),
    ),
    Setting(
        ("BROKER_HISTORY_MINUTES", "BROKER_HISTORY_HOURS"),
        "2880 / 2160",
        (
            "how long `GET /stats/history` and the dashboard's charts keep one-minute points "
            "(two days) and hourly ones (90 days); see "
            "[History](operations.md#history-what-happened-minute-by-minute)"
        ),
    ),
    Setting(
        ("BROKER_CLAIM_LOG_THREAD",),
        "on",
        (
            "claim requests are noted in memory and written once a second by a thread, for "
            "`waiting`'s `no_workers`; in-process tests turn it off and write the notes themselves"
        ),
    ),
    Setting(
        ("BROKER_SQLITE_POLL_MS",),
        "50",
        ("on SQLite, how often each broker process looks for ready tasks while claims are parked"),
    ),
    Setting(
        ("BROKER_WORKER_HANDLERS",),
        "empty",
        (
            "modules of yours whose `@handler` functions `runworker` runs, comma-separated, "
            "as its `--handlers` ([workers.md](workers.md#handlers-of-your-own))"
        ),
    ),
    Setting(
        ("BROKER_TASKS_ALLOWED",),
        "empty",
        (
            "`django.tasks` paths `runworker` may import (fnmatch patterns); empty: the "
            "backend's `ALLOWED_TASKS` ([django.md](django.md))"
        ),
    ),
    Setting(
        ("BROKER_FETCH_ALLOWED_NETWORKS",),
        "empty",
        (
            "networks (CIDR, comma-separated, e.g. `127.0.0.0/8,10.1.0.0/16`) the "
            "`http_fetch` job type may reach although they are loopback, private, link-local "
            "or reserved; set it on the broker (enqueue check) and the workers (fetch check)."
            " A bad CIDR stops the process at start"
        ),
    ),
    Setting(
        ("WEB_CONCURRENCY", "GUNICORN_THREADS"),
        "2 / 256",
        (
            "gunicorn processes and threads per process (threads bound requests being worked "
            "on, not parked polls)"
        ),
    ),
    Setting(
        ("GUNICORN_CLIENT_TIMEOUT",),
        "30",
        (
            "seconds a request's head may take to arrive whole, and each read of its body; a "
            "client that stalls longer is answered (408 for a head, 400 for a body cut short)"
            " and closed, its thread back in the pool. Parked long-polls and idle keep-alive "
            "connections are not affected"
        ),
    ),
    Setting(
        ("GUNICORN_KEEPALIVE_HOLD",),
        "1",
        (
            "seconds the thread that answered a kept-alive connection waits for its next "
            "request and serves it itself, before handing the connection to gunicorn's "
            "poller; at most a quarter of the threads wait so, none while requests queue for "
            "a thread. At most 60; `0` turns it off (gthread's own way: every next request "
            "through the poller, which costs more CPU a request)"
        ),
    ),
    Setting(
        ("GUNICORN_WORKER_CONNECTIONS",),
        "12000",
        (
            "connections a gunicorn process holds, parked long-polls included ([idle "
            "workers](idle-workers.md))"
        ),
    ),
    Setting(
        ("BROKER_BIND",),
        "`127.0.0.1:8080`",
        (
            "where gunicorn, `make run` and `queue-broker serve` listen (`-b` overrides); "
            "`0.0.0.0:8080` to be reached from other hosts"
        ),
    ),
    Setting(
        ("GUNICORN_CONTROL_SOCKET",),
        "none (off)",
        (
            "a path for gunicorn's control socket (`gunicornc`: worker status, worker count);"
            " off unless set, since gunicorn's default path in the home directory is shared "
            "by every gunicorn the user runs"
        ),
    ),
    Setting(
        ("GUNICORN_ACCESS_LOG", "GUNICORN_LOG_LEVEL"),
        "none / `info`",
        "gunicorn's access log (a file, or `-` for stdout) and its own log level",
    ),
    Setting(
        ("FORWARDED_ALLOW_IPS",),
        "`127.0.0.1,::1`",
        "gunicorn's own: proxies whose `X-Forwarded-Proto` it trusts",
    ),
    Setting(
        ("BROKER_URL",),
        "`http://127.0.0.1:8080`",
        "where `runworker`, `produce` and `submit` find the broker (`--broker` overrides)",
    ),
    Setting(
        ("BROKER_API_TOKEN",),
        "empty",
        "the bearer token `runworker`, `produce` and `submit` send",
    ),
)


def markdown_table() -> str:
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for setting in ENVIRONMENT:
        names = " / ".join(f"`{name}`" for name in setting.names)
        lines.append(f"| {names} | {setting.default} | {setting.meaning} |")
    return "\n".join(lines) + "\n"
