"""http_fetch reaches no internal address unless BROKER_FETCH_ALLOWED_NETWORKS lets it (SSRF).

A URL naming such an address literally is a 400 at enqueue; a name is judged by the worker on
the addresses it resolves to, on the first request and on every redirect.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from rest_framework.test import APIClient

import broker
from broker.models import Task
from tests.api.test_api_jobtypes_worker import InProcessBroker
from tests.conftest import post
from workers import handlers
from workers.handlers import REGISTRY
from workers.jobtypes import _fetch
from workers.runner import Runner

pytestmark = pytest.mark.django_db

NOT_ALLOWED = "(not in BROKER_FETCH_ALLOWED_NETWORKS)"


class Server:
    """A local HTTP server that records the paths asked of it; /go?to=URL redirects there."""

    def __init__(self, host: str, port: int = 0) -> None:
        self.hits: list[str] = []
        hits = self.hits

        class Answers(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                target = parse_qs(urlsplit(self.path).query).get("to")
                self.send_response(302 if target else 200)
                if target:
                    self.send_header("Location", target[0])
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Answers)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def use_tls(self, context: ssl.SSLContext) -> None:
        """Answer HTTPS from now on (the listening socket's accepts do the handshake)."""
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


@contextmanager
def serving(host: str = "127.0.0.1", port: int = 0) -> Iterator[Server]:
    server = Server(host, port)
    try:
        yield server
    finally:
        server.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed when the block ends: nothing listens there


@pytest.fixture
def run_task(api_client: APIClient, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """run_task() → "acked" or "nacked": a real worker runner takes one task over the API."""
    runner = Runner(
        InProcessBroker(api_client),
        resolve=handlers.Dispatch(str(tmp_path / "jobs.log")),
        concurrency=1,
    )

    def run() -> str:
        outcome = runner.tick()
        assert outcome is not None, "nothing was claimed"
        return outcome

    yield run
    runner.close()


def fetch_task(api_client: APIClient, url: str) -> str:
    body = {"type": "http_fetch", "payload": {"url": url, "timeout_seconds": 5}, "max_attempts": 1}
    r = post(api_client, "/jobs", body)
    assert r.status_code == 201, r.content
    return str(r.json()["id"])


def shown(api_client: APIClient, pk: str) -> dict[str, Any]:
    return dict(api_client.get(f"/jobs/{pk}").json())


# -- at enqueue: an address written in the URL ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("http://127.0.0.1/", "127.0.0.1 is a loopback address"),
        ("http://127.1:8080/", "127.0.0.1 is a loopback address"),
        ("http://2130706433/", "127.0.0.1 is a loopback address"),
        ("http://[::1]:5432/", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is a loopback address"),
        ("http://0.0.0.0:8080/", "0.0.0.0 is an unspecified address"),
        ("http://[::]/", ":: is an unspecified address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        ("http://[fe80::1]/", "fe80::1 is a link-local address"),
        ("https://10.0.0.1/", "10.0.0.1 is a private address"),
        ("http://192.168.1.1/", "192.168.1.1 is a private address"),
        ("http://172.16.0.1/", "172.16.0.1 is a private address"),
        ("http://[fd00::1]/", "fd00::1 is a private address"),
        ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1 is a private address"),
        ("http://224.0.0.1/", "224.0.0.1 is a multicast address"),
        ("http://[ff02::1]/", "ff02::1 is a multicast address"),
        ("http://[::7f00:1]/", "::7f00:1 is a reserved address"),
        ("http://100.64.0.1/", "100.64.0.1 is a non-public address"),
    ],
)
def test_enqueue__url_naming_an_internal_address__400_on_payload_url(
    api_client: APIClient, url: str, refusal: str
) -> None:
    r = post(api_client, "/jobs", {"type": "http_fetch", "payload": {"url": url}})

    assert r.status_code == 400, r.content
    assert r.json()["fields"] == {"payload.url": [f"refused: {refusal} {NOT_ALLOWED}"]}
    assert not Task.objects.exists()


def test_enqueue_batch__internal_address__400_naming_the_item(api_client: APIClient) -> None:
    jobs = [{"payload": 1}, {"type": "http_fetch", "payload": {"url": "http://[::1]/"}}]

    r = post(api_client, "/jobs/batch", {"jobs": jobs})

    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["jobs.1.payload.url"]
    assert not Task.objects.exists()


def test_broker_enqueue__internal_address__invalid_task_error() -> None:
    with pytest.raises(broker.InvalidTaskError) as caught:
        broker.enqueue({"url": "http://169.254.169.254/"}, type="http_fetch")

    assert caught.value.fields == {
        "payload.url": [f"refused: 169.254.169.254 is a link-local address {NOT_ALLOWED}"]
    }


@pytest.mark.parametrize(
    "url", ["https://93.184.215.14/", "http://[2606:4700::1111]/", "http://localhost:1/"]
)
def test_enqueue__public_address_or_a_name__201(api_client: APIClient, url: str) -> None:
    # A name is judged when the worker resolves it; nothing is fetched at enqueue.
    r = post(api_client, "/jobs", {"type": "http_fetch", "payload": {"url": url}})
    assert r.status_code == 201


# -- in the worker: the addresses a name resolves to ---------------------------------------------


def test_worker__name_resolving_to_loopback__task_fails_naming_the_refusal_nothing_sent(
    api_client: APIClient, run_task: Callable[[], str]
) -> None:
    with serving("127.0.0.1") as internal:
        pk = fetch_task(api_client, f"http://localhost:{internal.port}/internal-admin?delete=1")

        assert run_task() == "nacked"

    task = shown(api_client, pk)
    assert task["state"] == "dead"
    assert task["last_error"].startswith("refused: ")
    assert f"is a loopback address {NOT_ALLOWED}" in task["last_error"]
    assert internal.hits == []


def test_worker__redirect_from_an_allowed_server_to_a_refused_address__fails_not_followed(
    api_client: APIClient, run_task: Callable[[], str], settings: Any
) -> None:
    settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    with serving("127.0.0.1") as allowed, serving("127.0.0.2") as internal:
        pk = fetch_task(api_client, f"{allowed.url}/go?to={internal.url}/internal-admin")

        assert run_task() == "nacked"

    error = shown(api_client, pk)["last_error"]
    assert error == f"refused: 127.0.0.2 is a loopback address {NOT_ALLOWED}"
    assert len(allowed.hits) == 1
    assert internal.hits == []


def outcome(payload: dict[str, Any]) -> str:
    """What running http_fetch came to: its result, or its error as the nack would carry it."""
    try:
        return repr(REGISTRY["http_fetch"].run(payload))
    except Exception as exc:  # any failure is an outcome to compare
        return f"{type(exc).__name__}: {exc}"


def test_worker__refused_address__same_error_whether_the_port_is_open_or_closed() -> None:
    # Distinct errors for open and closed ports would make http_fetch a port scanner.
    with serving("127.0.0.1") as server:
        outcomes = [
            outcome({"url": f"http://localhost:{port}/", "timeout_seconds": 2})
            for port in (server.port, closed_port())
        ]

    assert outcomes[0] == outcomes[1]
    assert outcomes[0].startswith("FetchRefusedError: refused: ")
    assert server.hits == []


def test_allowed_networks__let_a_local_server_through_at_enqueue_and_in_the_worker(
    api_client: APIClient, run_task: Callable[[], str], settings: Any
) -> None:
    with serving("127.0.0.1") as server:
        url = f"{server.url}/status"
        refused = post(api_client, "/jobs", {"type": "http_fetch", "payload": {"url": url}})
        assert refused.status_code == 400

        settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.0/8"]
        pk = fetch_task(api_client, url)
        assert run_task() == "acked"

    assert shown(api_client, pk)["result"] == {"response_status": 200}
    assert server.hits == ["/status"]


def test_worker__connects_to_the_address_it_checked__no_second_lookup(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # A name whose answer changes between lookups (DNS rebinding): allowed, then internal.
    settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1", "127.0.0.2", "127.0.0.2"])
    lookups: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "rebind.test":
            lookups.append(host)
            host = next(answers)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with serving("127.0.0.1") as checked, serving("127.0.0.2", checked.port) as internal:
        result = REGISTRY["http_fetch"].run({"url": f"http://rebind.test:{checked.port}/"})

    assert result == {"response_status": 200}
    assert lookups == ["rebind.test"]
    assert (checked.hits, internal.hits) == (["/"], [])


# -- HTTPS: the address is pinned, the certificate is still checked against the name -------------


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA (ca.pem) and a server certificate it signed for "localhost" only (leaf.*)."""
    where = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=broker test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign",
        cwd=where,
    )
    openssl(
        "req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", "/CN=localhost", cwd=where
    )
    (where / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
        "extendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "leaf.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        cwd=where,
    )
    return where


@pytest.fixture
def tls_server(
    certificates: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> Iterator[Server]:
    """HTTPS on 127.0.0.1 with a certificate for "localhost"; the worker trusts its CA."""
    settings.BROKER_FETCH_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    monkeypatch.setenv("SSL_CERT_FILE", str(certificates / "ca.pem"))
    _fetch.opener.cache_clear()  # its TLS context reads the trusted CAs when it is made
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificates / "leaf.pem", certificates / "leaf.key")
    with serving("127.0.0.1") as server:
        server.use_tls(tls)
        yield server
    monkeypatch.undo()
    _fetch.opener.cache_clear()


def test_https__name_on_the_certificate__fetched(tls_server: Server) -> None:
    payload = {"url": f"https://localhost:{tls_server.port}/tls", "timeout_seconds": 5}

    assert REGISTRY["http_fetch"].run(payload) == {"response_status": 200}
    assert tls_server.hits == ["/tls"]


def test_https__address_not_on_the_certificate__refused_by_verification(
    tls_server: Server,
) -> None:
    payload = {"url": f"https://127.0.0.1:{tls_server.port}/tls", "timeout_seconds": 5}

    assert "CERTIFICATE_VERIFY_FAILED" in outcome(payload)
    assert tls_server.hits == []
