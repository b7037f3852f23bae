"""The pool after its server dropped every connection (a restart, a failover): the first checkout
finds one stale connection, which has the pool replace all of them, instead of finding them one
by one with a reconnect interval's pause after each."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from broker import dbpool
from broker.dbgate import GatedConnection
from tests.procs import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.serial]  # a latency bound
STALE = 6


@contextmanager
def _pool(size: int) -> Iterator[tuple[dict[str, str], ConnectionPool]]:
    """A pool of `size` built as production builds it (GatedConnection, check_if_disturbed),
    its connections named so that pg_stat_activity tells them apart, and full: (their
    parameters, pool), closed after."""
    s = connection.settings_dict
    name = f"ha_pool_{uuid.uuid4().hex[:8]}"
    params = {"host": s["HOST"] or "127.0.0.1", "port": str(s["PORT"] or 5432), "user": s["USER"],
              "dbname": s["NAME"], "application_name": name}  # fmt: skip
    dbpool.reconnect_every(0.2)
    pool = ConnectionPool(kwargs=params, min_size=size, max_size=size, open=True,
                          connection_class=GatedConnection,
                          check=dbpool.check_if_disturbed)  # fmt: skip
    try:
        pool.wait(10)
        yield params, pool
    finally:
        pool.close()


def test_pool__every_connection_dropped__first_checkout_pays_one_interval_not_six(
    transactional_db: None,
) -> None:
    with _pool(STALE) as (params, pool):
        tag = params["application_name"]
        with psycopg.connect(**{**params, "application_name": "killer"}, autocommit=True) as c:
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                      " WHERE application_name = %s", [tag])  # fmt: skip
        time.sleep(0.2)  # the terminations have reached the sockets
        started = time.monotonic()
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        took = time.monotonic() - started
    # One stale connection found, a pause of one interval (0.2 s), then a fresh connection;
    # finding the six one by one would pause 6 x 0.2 s.
    assert took < 0.6, took


def _backends(params: dict[str, str], tag: str) -> set[int]:
    with psycopg.connect(**{**params, "application_name": "looker"}, autocommit=True) as c:
        rows = c.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", [tag]
        ).fetchall()
    return {pid for (pid,) in rows}


def _terminate(params: dict[str, str], pid: int) -> None:
    with psycopg.connect(**{**params, "application_name": "killer"}, autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(%s)", [pid])


def _refilled(params: dict[str, str], pool: ConnectionPool) -> tuple[set[int], dict[str, int]]:
    """Once the pool is full again: its connections' backends, and its counters."""
    tag = params["application_name"]
    wait_until(lambda: len(_backends(params, tag)) == pool.max_size, 10, 0.05, "the pool refilled")
    return _backends(params, tag), pool.get_stats()


def test_pool__a_connection_breaks_in_use__its_idle_peers_replaced_unchecked_once(
    transactional_db: None,
) -> None:
    # A vanished host's idle connections look healthy until each one's TCP timeout: nothing but
    # the loss of one of them says they are gone, so the pool must not wait to find them.
    with _pool(4) as (params, pool):
        tag = params["application_name"]
        with pool.connection() as conn:
            mine = conn.info.backend_pid
            idle = _backends(params, tag) - {mine}
            assert len(idle) == 3
            _terminate(params, mine)
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        renewed, stats = _refilled(params, pool)
    assert not renewed & (idle | {mine}), (renewed, idle, mine)
    # Dropped without a round trip each (which would have hung on a vanished host), and once.
    assert stats.get("connections_lost", 0) == 0, stats
    assert stats["connections_num"] == 4 + 4, stats


def _break_one_in_a_sibling(params: dict[str, str]) -> int:
    """What a sibling gunicorn worker (forked after the app loaded, as preload_app does) sees when
    its connection to a vanished host is given up: one of its own connections breaks. Its exit
    status: 0 once it did."""
    child = os.fork()
    if child == 0:  # pragma: no cover -- the child process
        status = 1
        try:
            with GatedConnection.connect(**params, autocommit=True) as conn:
                _terminate(params, conn.info.backend_pid)
                try:
                    conn.execute("SELECT 1")
                except psycopg.OperationalError:
                    status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def test_pool__another_process_of_the_node_lost_a_connection__idle_ones_replaced_unchecked(
    transactional_db: None,
) -> None:
    # A process that sent nothing to a vanished host since it vanished has nothing of its own to
    # tell it so: each of its idle connections would hold a request for 10 s, one after another.
    with _pool(4) as (params, pool):
        tag = params["application_name"]
        idle = _backends(params, tag)
        with pool.connection() as conn:  # nothing lost yet: a checkout keeps what the pool has
            assert conn.info.backend_pid in idle
        assert _break_one_in_a_sibling({**params, "application_name": "sibling"}) == 0
        started = time.monotonic()
        with pool.connection() as conn:
            conn.execute("SELECT 1")
            mine = conn.info.backend_pid
        took = time.monotonic() - started
        renewed, stats = _refilled(params, pool)
    assert mine not in idle
    assert not renewed & idle, (renewed, idle)
    assert stats.get("connections_lost", 0) == 0, stats  # dropped unchecked, once
    assert stats["connections_num"] == 4 + 4, stats
    assert took < 1.0, took  # one pause of the check loop (0.2 s) and a fresh connection
