"""http_fetch's handler: GETs url within a bounded timeout; the result is the status."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from contract.jobtypes.http_fetch import SCHEMES, SPEC
from workers.jobtypes import JobType

USER_AGENT = "queue-broker-worker/1 (http_fetch)"


class _WebOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects to http(s) only: a 3xx to ftp:// is the answer, not a new fetch."""

    max_redirections = 5

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


# No proxies from the environment: the worker fetches what the payload names, directly.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _WebOnlyRedirects)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """GET the URL, following up to 5 http(s) redirects; {"response_status": N} for any HTTP
    answer, 4xx and 5xx included (and a 3xx that points elsewhere than http/https).

    Raises OSError (URLError, timeouts) when no answer came within timeout_seconds.
    """
    request = urllib.request.Request(  # noqa: S310 -- scheme checked by the payload schema
        payload["url"], headers={"User-Agent": USER_AGENT}
    )
    try:
        with _OPENER.open(request, timeout=payload["timeout_seconds"]) as response:
            return {"response_status": response.status}
    except urllib.error.HTTPError as exc:  # an answer, just not a 2xx
        exc.close()
        return {"response_status": exc.code}


JOB_TYPE = JobType(SPEC, run)
