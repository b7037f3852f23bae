"""A kept-alive connection's next request is served by the thread that answered the last one
(broker.parking.keepalive), on a real gunicorn: no more than a quarter of the threads wait so,
and a stopping node does not sit out their hold."""

from __future__ import annotations

import http.client
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.procs import gunicorn, gunicorn_processes

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Four threads: one may wait for its connection's next request. A hold far longer than the
# tests' bounds, so a thread held too long shows.
ENV = {"WORKERS": "1", "GUNICORN_THREADS": "4", "GUNICORN_KEEPALIVE_HOLD": "30"}


@pytest.fixture(scope="module")
def broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gunicorn(live_db_url, tmp_path_factory.mktemp("hold"), **ENV) as base:
        yield base


def _connect(base: str) -> http.client.HTTPConnection:
    host, port = base.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=10)


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, dict]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_idle_kept_alive_connections__hold_one_thread_of_four__others_answered_at_once(
    broker: str,
) -> None:
    idle = [_connect(broker) for _ in range(4)]
    for conn in idle:
        assert _get(conn, "/healthz") == (200, {"status": "ok"})
    # Had each of the four kept its thread for the hold, this would wait 30 s for one.
    started = time.monotonic()
    for _ in range(3):
        fresh = _connect(broker)
        assert _get(fresh, "/healthz")[0] == 200
        fresh.close()
    assert time.monotonic() - started < 5
    # Every idle connection is still served, the one a thread waited on and those in the loop.
    for conn in idle:
        assert _get(conn, "/jobs?limit=1")[0] == 200
        conn.close()


def test_requests_back_to_back_on_one_connection__each_answered(broker: str) -> None:
    conn = _connect(broker)
    conn.request("POST", "/jobs", json.dumps({"payload": {"n": 1}}),
                 {"Content-Type": "application/json"})  # fmt: skip
    response = conn.getresponse()
    assert response.status == 201
    task = json.loads(response.read())["id"]
    for _ in range(20):
        assert _get(conn, f"/jobs/{task}")[1]["id"] == task
    conn.close()


def test_stop__a_held_thread_does_not_sit_out_its_hold(live_db_url: str, tmp_path: Path) -> None:
    with gunicorn(live_db_url, tmp_path, **ENV) as base:
        port = int(base.rsplit(":", 1)[1])
        master, _ = gunicorn_processes(port, workers=1)
        conn = _connect(base)
        assert _get(conn, "/healthz")[0] == 200  # its thread now waits for the next request
        started = time.monotonic()
        master.send_signal(signal.SIGTERM)
        master.wait(25)
        # gunicorn keeps a stopping worker's kept-alive connections 2 s; not the 30-s hold.
        assert time.monotonic() - started < 10
        conn.close()
