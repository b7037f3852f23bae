"""Clients that stall mid-request give their thread back (broker.parking.deadline): a node run
with 2 threads and GUNICORN_CLIENT_TIMEOUT=1 still answers once its threads are held by them."""

from __future__ import annotations

import http.client
import json
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.models import Task
from tests.procs import (
    ROOT,
    VENV_BIN,
    child_env,
    free_port,
    gunicorn,
    self_signed_cert,
    tls_client_context,
)
from tests.procs import http as call

pytestmark = [pytest.mark.e2e, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def broker(live_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {"WORKERS": "1", "GUNICORN_THREADS": "2", "GUNICORN_CLIENT_TIMEOUT": str(TIMEOUT_S)}
    with gunicorn(live_db_url, tmp_path_factory.mktemp("stalled"), **env) as base:
        yield base


def _address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], dict]:
    """The broker's answer on this connection, read to its end: status, headers, JSON body."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    body = json.loads(response.read())
    assert sock.recv(1) == b"", "the connection closes after the answer"
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def _enqueue_head(length: int) -> bytes:
    return (
        "POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_stalled_heads_and_bodies__threads_freed__each_answered_and_closed(
    broker: str, db_url: str
) -> None:
    body = b'{"payload": {"stalled": true}}'
    stalled = []
    for _ in range(2):  # headers begun, never ended
        s = socket.create_connection(_address(broker), timeout=15)
        s.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        stalled.append(("head", s))
    for _ in range(2):  # the head whole, half the body
        s = socket.create_connection(_address(broker), timeout=15)
        s.sendall(_enqueue_head(len(body)) + body[:10])
        stalled.append(("body", s))
    time.sleep(0.2)  # both threads are held by now

    started = time.monotonic()
    status, health = call("GET", f"{broker}/healthz", timeout=15)
    # Four stalls, two threads, each thread freed after 1 s: the health check waits about 2 s,
    # never for as long as a client likes.
    assert status == 200, health
    assert time.monotonic() - started < 8

    for part, s in stalled:
        with s:
            status, headers, answer = _answer(s)
        assert headers["connection"] == "close"
        assert headers["content-type"].startswith("application/json")
        if part == "head":
            assert status == 408
            assert answer["error"].startswith("The request did not arrive whole within 1 s")
        else:
            assert status == 400  # what arrived parses, but it is not what was sent
            assert "cut short" in answer["error"]
    assert not Task.objects.exists()


def test_chunked_body_stalled__400_json_and_closed(broker: str, db_url: str) -> None:
    # A chunked body is read whole before any view runs (broker.api.wsgi.buffer_chunked).
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n13\r\n{\"pay")  # fmt: skip
        status, headers, answer = _answer(s)
    assert (status, headers["connection"]) == (400, "close")
    assert answer["error"].startswith(
        "The body stopped arriving for 1 s: the request was cut short"
    )
    assert not Task.objects.exists()


def test_admin_login_cut_short__refused__nobody_logged_in(broker: str, db_url: str) -> None:
    from django.contrib.auth.models import User

    User.objects.create_superuser("stalled-admin", "admin@example.com", "a-password")
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(b"GET /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        page = http.client.HTTPResponse(s)
        page.begin()
        html = page.read().decode()
        cookie = page.getheader("Set-Cookie", "").split(";", 1)[0]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token and cookie.startswith("csrftoken="), (cookie, html[:300])
    form = f"csrfmiddlewaretoken={token[1]}&username=stalled-admin&password=a-password&next=/admin/"
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(
            "POST /admin/login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(form) + 5}\r\n\r\n{form}".encode()
        )  # the whole form, five bytes short of what was announced, then a stall
        status, headers, answer = _answer(s)
    # Django parses a form from what arrived: this one logged the user in (302, a session).
    assert status == 400, (status, answer)
    assert "cut short" in answer["error"]
    assert "set-cookie" not in headers


def test_cut_client_keeps_its_end_open__the_node_goes_on_at_once(broker: str, db_url: str) -> None:
    # gthread's graceful close waits up to 2 s for the client's end to close, on the loop that
    # accepts and dispatches every connection of the process.
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        cut = http.client.HTTPResponse(s)
        cut.begin()
        cut.read()
        assert cut.status == 408
        started = time.monotonic()
        status, _ = call("GET", f"{broker}/healthz", timeout=15)
        took = time.monotonic() - started
    assert status == 200
    assert took < 1.0, f"the health check waited {took:.2f} s behind a cut connection"


def test_closed_by_the_server__client_keeps_its_end_open__the_node_goes_on_at_once(
    broker: str, db_url: str
) -> None:
    # An HTTP/1.0 request: the server closes the connection after its answer, and gunicorn's
    # graceful close waited for the client's end to close on the process's main loop.
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, _, answer = _answer(s)  # read to the server's FIN; this end stays open
        assert status == 200, answer
        started = time.monotonic()
        status, _ = call("GET", f"{broker}/healthz", timeout=15)
        took = time.monotonic() - started
    assert status == 200
    assert took < 1.0, f"the health check waited {took:.2f} s behind a closing connection"


def test_tls_head_stalled__408_over_tls(live_db_url: str, tmp_path: Path) -> None:
    env = {"WORKERS": "1", "GUNICORN_CLIENT_TIMEOUT": str(TIMEOUT_S)}
    with gunicorn(live_db_url, tmp_path, "tls", tls=self_signed_cert(tmp_path), **env) as base:
        raw = socket.create_connection(_address(base.replace("https", "http")), timeout=15)
        with tls_client_context().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            status, headers, answer = _answer(s)
    assert (status, headers["connection"]) == (408, "close")
    assert "did not arrive whole" in answer["error"]


def test_head_dripped_byte_by_byte__cut_at_the_deadline(broker: str, db_url: str) -> None:
    request = _enqueue_head(2) + b"{}"
    with socket.create_connection(_address(broker), timeout=15) as s:
        started = time.monotonic()
        try:
            for byte in request:
                s.sendall(bytes([byte]))  # a byte every 0.2 s: each read gets one in time
                time.sleep(0.2)
        except OSError:
            pass  # the broker closed the connection
        status, _, answer = _answer(s)
    assert status == 408, answer
    assert time.monotonic() - started < 4  # a whole head in 1 s, not a byte per second


def test_body_arriving_slowly_but_steadily__served(broker: str, db_url: str) -> None:
    body = json.dumps({"payload": {"slow": "x" * 40}, "queue": "steady"}).encode()
    with socket.create_connection(_address(broker), timeout=15) as s:
        s.sendall(_enqueue_head(len(body)))
        for i in range(0, len(body), 20):  # 2.4 s in all, a piece every 0.6 s
            time.sleep(0.6)
            s.sendall(body[i : i + 20])
        status_line = s.recv(65536).split(b"\r\n", 1)[0]
    assert b" 201 " in status_line
    assert Task.objects.filter(queue="steady").count() == 1


def test_kept_alive_connection__idle_longer_than_the_timeout__still_served(
    broker: str, db_url: str
) -> None:
    conn = http.client.HTTPConnection(*_address(broker), timeout=15)
    try:
        conn.request("GET", "/healthz")
        health = conn.getresponse()
        assert (health.status, bool(health.read())) == (200, True)
        time.sleep(TIMEOUT_S * 2)  # between requests: no deadline, the keep-alive timeout
        conn.request("POST", "/jobs", json.dumps({"payload": 1, "queue": "kept"}),
                     {"Content-Type": "application/json"})  # fmt: skip
        response = conn.getresponse()
        assert response.status == 201, response.read()
    finally:
        conn.close()


def test_parked_claims__wait_past_the_timeout__answered(broker: str, db_url: str) -> None:
    got: dict[str, tuple] = {}

    def claim(name: str, queue: str) -> None:
        got[name] = call("GET", f"{broker}/jobs/next?queue={queue}&wait_ms=3000", timeout=15)

    threads = [
        threading.Thread(target=claim, args=("empty", "parked-empty")),
        threading.Thread(target=claim, args=("woken", "parked-woken")),
    ]
    for t in threads:
        t.start()
    time.sleep(2 * TIMEOUT_S)  # parked past the client timeout: a parked poll holds no thread
    _, created = call("POST", f"{broker}/jobs", {"payload": "late", "queue": "parked-woken"})
    for t in threads:
        t.join(15)
    assert got["empty"][0] == 204
    status, delivery = got["woken"]
    assert status == 200, delivery
    assert delivery["task"]["id"] == created["id"]


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("GUNICORN_CLIENT_TIMEOUT", "soon", "a number of seconds above 0, not 'soon'"),
        ("GUNICORN_KEEPALIVE_HOLD", "120", "a number of seconds from 0 (0: off) to 60, not '120'"),
    ],
)
def test_bad_seconds_setting__gunicorn_stops_at_start__naming_it(
    db_url: str, name: str, raw: str, said: str
) -> None:
    ended = subprocess.run(
        [str(VENV_BIN / "gunicorn"), "-b", f"127.0.0.1:{free_port()}"],
        env=child_env(db_url, **{name: raw}),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert ended.returncode != 0
    assert f"{name} must be {said}" in ended.stderr
