"""http_fetch's handler: GETs url, refusing addresses the fetch policy does not allow."""

from __future__ import annotations

from typing import Any

from contract.jobtypes.http_fetch import SPEC
from workers import handler
from workers.jobtypes._fetch import fetch


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> dict[str, Any]:
    """{"response_status": N} for any HTTP answer (a 3xx to a non-web scheme too).

    Raises FetchRefusedError ("refused: 127.0.0.1 is a loopback address ...") when the host
    resolves only to refused addresses, first or after a redirect; OSError when no answer came.
    """
    return {"response_status": fetch(payload["url"], payload["timeout_seconds"])}
