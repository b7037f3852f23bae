"""The pool after its server dropped every connection (a restart, a failover): the first checkout
finds one stale connection and has the pool drop all of them, instead of finding them one by
one with a reconnect interval's pause after each."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from broker import dbpool

pytestmark = [pytest.mark.postgres, pytest.mark.serial]  # a latency bound
STALE = 6


def test_pool__every_connection_dropped__first_checkout_pays_one_interval_not_six(
    transactional_db: None,
) -> None:
    s = connection.settings_dict
    tag = f"ha_reconnect_{uuid.uuid4().hex[:8]}"
    params = {"host": s["HOST"] or "127.0.0.1", "port": s["PORT"] or 5432, "user": s["USER"],
              "dbname": s["NAME"], "application_name": tag}  # fmt: skip
    dbpool.reconnect_every(0.2)
    pool = ConnectionPool(kwargs=params, min_size=STALE, max_size=STALE,
                          check=dbpool.check_if_disturbed, open=True)  # fmt: skip
    try:
        pool.wait(10)
        with psycopg.connect(**{**params, "application_name": "killer"}, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE application_name = %s", [tag])  # fmt: skip
        time.sleep(0.2)  # the terminations have reached the sockets
        started = time.monotonic()
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        took = time.monotonic() - started
    finally:
        pool.close()
    # One stale connection found, a pause of one interval (0.2 s), then a fresh connection;
    # finding the six one by one would pause 6 x 0.2 s.
    assert took < 0.6, took
