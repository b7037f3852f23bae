"""http_fetch: GETs url (http or https) within a bounded timeout; the result is the status."""

from __future__ import annotations

from urllib.parse import urlsplit

from rest_framework import serializers

from contract.fields import PayloadSchema, StrictNumber, StrictString
from contract.jobtypes import JobSpec
from contract.netpolicy import literal_refusal

MAX_TIMEOUT_SECONDS = 10.0
MAX_URL = 2048
SCHEMES = ("http", "https")


class FetchPayload(PayloadSchema):
    url = StrictString(max_length=MAX_URL, trim_whitespace=False)
    timeout_seconds = StrictNumber(
        min_value=0.001, max_value=MAX_TIMEOUT_SECONDS, default=MAX_TIMEOUT_SECONDS
    )

    # The scheme and a host, no space or control character; addresses are judged by validate_url.
    json_schema_rules = {
        "url": {
            "format": "uri",
            "pattern": r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#\s\u0000-\u001f]+[^\s\u0000-\u001f]*$",
        }
    }

    def validate_url(self, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
        except ValueError:
            parts = None
        if parts is None or parts.scheme.lower() not in SCHEMES:
            raise serializers.ValidationError("Must be an http:// or https:// URL.")
        if not parts.hostname or any(c.isspace() or ord(c) < 32 for c in value):
            raise serializers.ValidationError("Must be an http:// or https:// URL with a host.")
        # A name is judged by the worker, on the addresses it resolves to when it fetches.
        refused = literal_refusal(parts.hostname)
        if refused:
            raise serializers.ValidationError(refused)
        return value


SPEC = JobSpec(
    name="http_fetch",
    schema=FetchPayload,
    description=(
        f"GETs url (http/https, timeout_seconds ≤ {MAX_TIMEOUT_SECONDS:g}); result: "
        "response_status. Loopback, private, link-local and reserved addresses are refused "
        "unless BROKER_FETCH_ALLOWED_NETWORKS lists them."
    ),
    sample=lambda broker_url: {"url": f"{broker_url.rstrip('/')}/healthz"},
)
