"""http_fetch: GETs url (http or https) within a bounded timeout; the result is the status."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from rest_framework import serializers

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictNumber, StrictString

MAX_TIMEOUT_SECONDS = 10.0
USER_AGENT = "queue-broker-worker/1 (http_fetch)"


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) only: a 3xx to ftp:// is the answer, not a new fetch."""

    max_redirections = 5

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        if urlsplit(newurl).scheme.lower() not in ("http", "https"):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


# No proxies from the environment: the worker fetches what the payload names, directly.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _WebOnlyRedirects)


class FetchPayload(PayloadSchema):
    url = StrictString(max_length=2048, trim_whitespace=False)
    timeout_seconds = StrictNumber(
        min_value=0.001, max_value=MAX_TIMEOUT_SECONDS, default=MAX_TIMEOUT_SECONDS
    )

    def validate_url(self, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
        except ValueError:
            parts = None
        if parts is None or parts.scheme.lower() not in ("http", "https"):
            raise serializers.ValidationError("Must be an http:// or https:// URL.")
        if not parts.hostname or any(c.isspace() or ord(c) < 32 for c in value):
            raise serializers.ValidationError("Must be an http:// or https:// URL with a host.")
        return value


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """GET the URL, following up to 5 http(s) redirects; {"response_status": N} for any HTTP
    answer, 4xx and 5xx included (and a 3xx that points elsewhere than http/https).

    Raises OSError (URLError, timeouts) when no answer came within timeout_seconds.
    """
    request = urllib.request.Request(  # noqa: S310 -- scheme checked by FetchPayload
        payload["url"], headers={"User-Agent": USER_AGENT}
    )
    try:
        with _OPENER.open(request, timeout=payload["timeout_seconds"]) as response:
            return {"response_status": response.status}
    except urllib.error.HTTPError as exc:  # an answer, just not a 2xx
        exc.close()
        return {"response_status": exc.code}


JOB_TYPE = JobType(
    name="http_fetch",
    schema=FetchPayload,
    run=run,
    description="GETs url (http/https, timeout_seconds ≤ 10); result: response_status.",
    sample=lambda broker_url: {"url": f"{broker_url.rstrip('/')}/healthz"},
)
