"""broker.dbpool, broker.dbgate: reconnect attempts while the database is away, and their logs."""

from __future__ import annotations

import json
import logging
import os
import time

import psycopg
import pytest

from broker import dbgate, dbpool
from tests.procs import free_port, python


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbgate, "_gate", dbgate._Gate())
    monkeypatch.setattr(dbgate.GatedConnection, "every_s", 0.3)


def _refused() -> str:
    return f"host=127.0.0.1 port={free_port()} dbname=x user=x connect_timeout=2"


def test_gated_connection__failed_moments_ago__the_next_attempts_do_not_go_out(gate) -> None:
    with pytest.raises(psycopg.OperationalError, match="refused"):
        dbgate.GatedConnection.connect(_refused())
    for _ in range(5):  # what the pool's other lost connections would try meanwhile
        with pytest.raises(psycopg.OperationalError, match="less than BROKER_DB_RECONNECT_MS"):
            dbgate.GatedConnection.connect(_refused())
    time.sleep(0.3)
    with pytest.raises(psycopg.OperationalError, match="refused"):  # the next interval: one
        dbgate.GatedConnection.connect(_refused())


def test_gated_connection__success__opens_the_gate_for_everyone(gate) -> None:
    dbgate._gate.record(ok=False)
    assert dbgate._gate.shut(0.3)
    dbgate._gate.record(ok=True)
    assert not dbgate._gate.shut(0.3)


def test_quiet_reconnects__first_warning_then_one_per_interval_with_a_count() -> None:
    quiet = dbpool.QuietReconnects()
    quiet.EVERY_S = 0.2

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("psycopg.pool", logging.WARNING, __file__, 1, msg, (), None)

    assert quiet.filter(record("error connecting in 'pool-1': refused"))
    assert [quiet.filter(record("error connecting in 'pool-1': refused")) for _ in range(3)] == [
        False
    ] * 3
    assert quiet.filter(record("discarding broken connection"))  # other lines all pass
    time.sleep(0.2)
    last = record("error connecting in 'pool-1': refused")
    assert quiet.filter(last)
    assert last.msg.endswith("(and 3 more failed attempts since the last)")


def test_prepare__every_postgres_pool_gets_the_gate_and_the_schedule_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from psycopg_pool.base import AttemptWithBackoff

    for name in ("INITIAL_DELAY", "DELAY_BACKOFF"):
        monkeypatch.setattr(AttemptWithBackoff, name, getattr(AttemptWithBackoff, name))
    monkeypatch.setattr(dbgate.GatedConnection, "every_s", dbgate.GatedConnection.every_s)
    pg, bare = "django.db.backends.postgresql", "django.db.backends.sqlite3"
    databases = {
        "pooled": {"ENGINE": pg, "OPTIONS": {"pool": {"max_size": 4}}},
        "default_pool": {"ENGINE": pg, "OPTIONS": {"pool": True}},
        "unpooled": {"ENGINE": pg},
        "sqlite": {"ENGINE": bare, "OPTIONS": {}},
    }

    dbpool.prepare(databases, reconnect_ms=300)

    assert databases["pooled"]["OPTIONS"]["pool"] == {
        "max_size": 4, "connection_class": dbgate.GatedConnection
    }  # fmt: skip
    assert databases["default_pool"]["OPTIONS"]["pool"] == {
        "connection_class": dbgate.GatedConnection
    }
    assert "pool" not in databases["unpooled"]["OPTIONS"]
    assert databases["sqlite"]["OPTIONS"] == {}
    assert (AttemptWithBackoff.INITIAL_DELAY, AttemptWithBackoff.DELAY_BACKOFF) == (0.3, 1.0)
    assert dbgate.GatedConnection.every_s == 0.3


TCP = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
       "tcp_user_timeout")  # fmt: skip


def _options(database_url: str) -> dict[str, object]:
    code = (
        "import json; from django.conf import settings as s;"
        "o = s.DATABASES['default']['OPTIONS'];"
        f"print(json.dumps({{k: o.get(k) for k in {TCP!r}}}))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "queueproject.settings",
           "DATABASE_URL": database_url}  # fmt: skip
    return json.loads(python(code, env).stdout)


def test_settings__postgres__a_vanished_server_given_up_in_seconds_unless_the_url_says() -> None:
    assert _options("postgres://u@db.example:5432/broker") == {
        "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }  # fmt: skip
    named = _options("postgres://u@db.example/broker?tcp_user_timeout=30000&keepalives=0")
    assert (named["tcp_user_timeout"], named["keepalives"]) == (30_000, 0)
    assert named["keepalives_idle"] == 5


def test_listen_conninfo__own_url__the_same_defaults_for_what_it_does_not_name(
    settings: object,
) -> None:
    from broker.wakeup import listen_conninfo

    url = "postgresql://u@h1:5432,h2:5432/broker?target_session_attrs=read-write&keepalives_idle=9"
    settings.BROKER_LISTEN_DATABASE_URL = url  # type: ignore[attr-defined]
    conninfo, params = listen_conninfo()
    assert conninfo == url
    assert params == {
        "keepalives": 1, "keepalives_interval": 2, "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }  # fmt: skip
