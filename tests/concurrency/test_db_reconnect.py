"""The pool after its server dropped every connection (a restart, a failover): the first checkout
finds one stale connection, which has the pool replace all of them, instead of finding them one
by one with a reconnect interval's pause after each. And the wake-up listener, which reconnects
as soon as a process of the node lost a connection to its server."""

from __future__ import annotations

import os
import resource
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg_pool import ConnectionPool

from broker import dbgate, dbpool
from broker.dbgate import GatedConnection
from broker.wakeup import ANY_QUEUE, Waiter, hub
from tests.procs import wait_until
from tests.proxy import proxy_to

pytestmark = [pytest.mark.postgres, pytest.mark.serial]  # a latency bound
STALE = 6


def _server() -> tuple[str, int]:
    """Where the test database's PostgreSQL is: (host, port)."""
    s = connection.settings_dict
    return s["HOST"] or "127.0.0.1", int(s["PORT"] or 5432)


def _params(name: str, host: str, port: int) -> dict[str, str]:
    """Connection parameters for the test database through host:port, named `name` (so that
    pg_stat_activity tells the connections apart)."""
    s = connection.settings_dict
    return {"host": host, "port": str(port), "user": s["USER"], "dbname": s["NAME"],
            "application_name": name}  # fmt: skip


@contextmanager
def _pool(size: int) -> Iterator[tuple[dict[str, str], ConnectionPool]]:
    """A pool of `size` built as production builds it (GatedConnection, check_if_disturbed),
    its connections named so that pg_stat_activity tells them apart, and full: (their
    parameters, pool), closed after."""
    params = _params(f"ha_pool_{uuid.uuid4().hex[:8]}", *_server())
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


@contextmanager
def _descriptors_taken_below(fd: int) -> Iterator[None]:
    """Every descriptor number below `fd` in use, as in a process holding that many parked polls:
    what opens meanwhile (a pooled connection) gets a number from `fd` on."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < fd + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(fd + 100, hard), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < fd - 1:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for filler in fillers:
            os.close(filler)


def test_pool__its_connections_past_descriptor_1024__checkouts_at_once(
    transactional_db: None,
) -> None:
    # select() refuses descriptors from FD_SETSIZE (1024) on: the check raised ValueError, taken
    # for a failed check, and each checkout that met such a connection slept 0.2 s and tried the
    # next; with every connection past it, none was handed out (PoolTimeout).
    with _descriptors_taken_below(1100), _pool(4) as (_, pool):
        started = time.monotonic()
        for _ in range(20):
            with pool.connection(timeout=2) as conn:
                assert conn.fileno() >= 1100
                conn.execute("SELECT 1")
        took = time.monotonic() - started
    assert took < 0.5, took


def test_check_if_disturbed__past_descriptor_1024__a_dropped_connection_still_found(
    transactional_db: None,
) -> None:
    params = _params("disturbed", *_server())
    with _descriptors_taken_below(1100), psycopg.connect(**params, autocommit=True) as conn:
        assert conn.fileno() >= 1100
        dbpool.check_if_disturbed(conn)  # healthy: nothing to read, no round trip
        _terminate(params, conn.info.backend_pid)
        time.sleep(0.2)  # the termination has reached the socket
        with pytest.raises(psycopg.OperationalError):
            dbpool.check_if_disturbed(conn)


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


@contextmanager
def _listening(settings: Any, port: int) -> Iterator[tuple[Waiter, list[bool]]]:
    """This process's wake-up listener, on PostgreSQL through `port`, with one claim parked (its
    first wake taken) and a record of `hub.away` every millisecond: (the claim, the record)."""
    s = connection.settings_dict
    settings.BROKER_LISTEN_DATABASE_URL = f"postgresql://{s['USER']}@127.0.0.1:{port}/{s['NAME']}"
    hub.stop()
    waiter = hub.park(None)
    away: list[bool] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.001):
            away.append(hub.away)

    watcher = threading.Thread(target=watch)
    try:
        wait_until(lambda: hub.listening, 10, 0.01, "the listener")
        hub.take(waiter)
        watcher.start()
        yield waiter, away
    finally:
        done.set()
        if watcher.is_alive():
            watcher.join()
        hub.unpark(waiter)
        hub.stop()


def _sibling_params(port: int) -> dict[str, str]:
    """A sibling's connection to the server the listener of `_listening(port)` is on."""
    return _params("sibling", "127.0.0.1", port)


def _notify(port: int, payload: str) -> None:
    with psycopg.connect(**_sibling_params(port), autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", ["broker_ready", payload])


def test_listener__the_node_lost_a_connection_to_its_server__reconnects_no_wake_never_away(
    transactional_db: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # A backend lost on a healthy server (an idle timeout, a terminated one): the listener
    # reconnects, but its old connection heard everything meanwhile, so no parked claim is
    # woken (ten thousand claim queries for nothing), and nothing answers 503.
    _, port = _server()
    with _listening(settings, port) as (waiter, away):
        dbgate._node_loss.record(time.monotonic(), 1)  # a connection to another server lost
        time.sleep(0.5)
        assert "listener: this node lost" not in caplog.text  # not ours: no reconnection
        assert _break_one_in_a_sibling(_sibling_params(port)) == 0
        wait_until(lambda: "listener reconnected" in caplog.text, 5, 0.005, "the reconnection")
        time.sleep(0.3)
        assert hub.take(waiter) is None
        _notify(port, "q:1")  # heard on the new connection
        wait_until(lambda: hub.take(waiter) == "q", 5, 0.005, "a NOTIFY after the reconnection")
    assert away and not any(away)


def test_listener__its_host_vanished__reconnects_at_once_and_wakes_every_parked_claim(
    transactional_db: None, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Its host vanished (the proxy's open connections go silent; new ones reach the server, as
    # the next host of a multi-host URL): an idle LISTEN would learn nothing for 11 s, while the
    # writes back on the next host send NOTIFYs it does not hear. The node's loss tells it.
    with proxy_to(*_server()) as proxy:
        with _listening(settings, proxy.port) as (waiter, away):
            proxy.freeze()
            _notify(proxy.port, "q:1")  # unheard: sent to a server the listener lost
            started = time.monotonic()
            assert _break_one_in_a_sibling(_sibling_params(proxy.port)) == 0
            wait_until(lambda: hub.take(waiter) == ANY_QUEUE, 5, 0.005, "the reconnection's wake")
            took = time.monotonic() - started
            _notify(proxy.port, "q:1")
            wait_until(lambda: hub.take(waiter) == "q", 5, 0.005, "a NOTIFY after the reconnection")
    assert "listener reconnected" in caplog.text
    assert took < 1.5, took  # a check interval (0.2 s), a connection, the old one's 0.5 s
    assert away and not any(away)
