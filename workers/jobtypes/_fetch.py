"""http_fetch's connections: every address a name resolves to is checked, then connected to.

The check (contract.netpolicy) runs on the addresses the worker is about to connect to, not on
the URL's text, and the socket connects to exactly those: no second lookup a DNS answer could
rebind. Each redirect opens a new connection, so it is checked again. HTTPS still verifies the
certificate against the URL's host name.
"""

from __future__ import annotations

import functools
import http.client
import ipaddress
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from contract.jobtypes.http_fetch import SCHEMES
from contract.netpolicy import allowed_networks, refusal
from workers.handlers import PlainError

USER_AGENT = "queue-broker-worker/1 (http_fetch)"
MAX_REDIRECTIONS = 5


class FetchRefusedError(PlainError):
    """The host resolves only to addresses this worker may not reach; nothing was sent. The
    task's error is the refusal alone (a policy said no: no traceback to read).

    Not an OSError: urllib passes it through as is, instead of wrapping it in a URLError.
    """


def checked_addresses(host: str, port: int) -> list[tuple[int, Any]]:
    """(family, sockaddr) of each address `host` resolves to that the policy allows.

    Raises FetchRefusedError naming the first refusal when none is allowed, before any
    connection: refused addresses answer the same whether a port is open or not.
    """
    allowed = allowed_networks()
    passing: list[tuple[int, Any]] = []
    refusals: list[str] = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        reason = refusal(ipaddress.ip_address(sockaddr[0]), allowed)
        if reason:
            refusals.append(reason)
        else:
            passing.append((family, sockaddr))
    if not passing:
        raise FetchRefusedError(refusals[0] if refusals else f"refused: {host} has no address")
    return passing


def pinned_connection(
    address: tuple[str, int], timeout: Any = None, source_address: Any = None
) -> socket.socket:
    """socket.create_connection's stand-in: connects only to addresses checked just now."""
    host, port = address
    error = OSError(f"could not connect to {host}:{port}")
    for family, sockaddr in checked_addresses(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if isinstance(timeout, (int, float)):
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            sock.connect(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
        else:
            return sock
    raise error


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # connect() opens its socket through this hook (HTTPSConnection then wraps it in TLS
        # with server_hostname=self.host, so the certificate is checked against the name).
        self._create_connection = pinned_connection


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = pinned_connection


class _PinnedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_PinnedHTTPConnection, req)


class _PinnedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__(context=context)
        self._tls = context

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_PinnedHTTPSConnection, req, context=self._tls)


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) only: a 3xx to ftp:// is the answer, not a new fetch."""

    max_redirections = MAX_REDIRECTIONS

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme.lower() not in SCHEMES:
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


@functools.cache
def opener() -> urllib.request.OpenerDirector:
    """The one opener: no proxies from the environment, pinned connections, web-only redirects."""
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        _PinnedHTTPHandler(),
        _PinnedHTTPSHandler(ssl.create_default_context()),
        _WebOnlyRedirects(),
    )


def fetch(url: str, timeout: float) -> int:
    """GET url, following up to MAX_REDIRECTIONS http(s) redirects; the answer's status.

    Any HTTP answer counts, 4xx and 5xx included. Raises FetchRefusedError for an address the
    policy refuses, OSError (URLError, timeouts) when no answer came within `timeout`.
    """
    request = urllib.request.Request(  # noqa: S310 -- scheme checked by the payload schema
        url, headers={"User-Agent": USER_AGENT}
    )
    try:
        with opener().open(request, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:  # an answer, just not a 2xx
        exc.close()
        return exc.code
