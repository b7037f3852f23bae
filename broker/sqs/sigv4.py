"""AWS Signature Version 4: the canonical request rebuilt from what arrived, checked in constant
time against the signature made with the key's secret; SQS's refusals otherwise."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from functools import lru_cache
from urllib.parse import parse_qsl, quote

from django.http import HttpRequest

from broker.sqs import errors, limits

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "sqs"  # the service a credential scope must name
_DATE_FORMAT = "%Y%m%dT%H%M%SZ"
_AMZ_PREFIX = "HTTP_X_AMZ_"  # X-Amz-* headers as WSGI names them
_FIELDS = frozenset({"Credential", "SignedHeaders", "Signature"})
_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your "
    "AWS Secret Access Key and signing method."
)


def verify(request: HttpRequest, body: bytes, credentials: dict[str, str], now: datetime) -> str:
    """The access key id that signed `request`; raises SQS's 403 errors when none did."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header.startswith(ALGORITHM + " "):
        raise errors.MissingAuthenticationToken("Request is missing Authentication Token")
    fields = _fields(header[len(ALGORITHM) + 1 :])
    scope = fields.get("Credential", "").split("/")
    signed = fields.get("SignedHeaders", "")
    if len(scope) != 5 or scope[4] != "aws4_request" or not signed or not fields.get("Signature"):
        raise errors.SignatureDoesNotMatch(f"Authorization header is malformed: {header[:200]}")
    key_id, day, region, service, _ = scope
    if service != SERVICE:
        # A signature made for another service (s3, iam) must not be good here, as in SQS.
        raise errors.SignatureDoesNotMatch(
            f"Credential should be scoped to correct service: '{SERVICE}'."
        )
    secret = credentials.get(key_id)
    if secret is None:
        raise errors.InvalidClientTokenId("The security token included in the request is invalid.")
    stamp = _checked_date(request, day, now)
    names = signed.split(";")
    if len(set(names)) != len(names):
        # Each name puts its header's value in the canonical request once: a name repeated
        # thousands of times over a long header would cost their product before any check.
        raise errors.SignatureDoesNotMatch("SignedHeaders names a header more than once.")
    payload_hash = hashlib.sha256(body).hexdigest()
    declared = request.META.get("HTTP_X_AMZ_CONTENT_SHA256")
    if declared is not None and declared != payload_hash:
        # Signed or not, a declared hash that is not the body's would let the body be swapped.
        raise errors.SignatureDoesNotMatch("X-Amz-Content-Sha256 is not the SHA-256 of the body.")
    _check_coverage(request, names)
    expected = signature(request, names, payload_hash, secret, stamp, (day, region, service))
    if not hmac.compare_digest(expected.encode(), fields["Signature"].encode()):
        raise errors.SignatureDoesNotMatch(_MISMATCH)
    return key_id


def _fields(text: str) -> dict[str, str]:
    """`Credential=..., SignedHeaders=..., Signature=...` → their values. Read by splitting,
    once through the text: a regular expression's backtracking over a long run of spaces cost
    time quadratic in the header's length before any key was checked."""
    found: dict[str, str] = {}
    for part in text.split(","):
        name, equals, value = part.strip().partition("=")
        if equals and name in _FIELDS and value == "".join(value.split()):
            found[name] = value
    return found


def signature(
    request: HttpRequest,
    names: list[str],
    payload_hash: str,
    secret: str,
    stamp: str,
    scope: tuple[str, str, str],
) -> str:
    """The hex signature of `request` over the headers `names`, for (day, region, service)."""
    canonical = canonical_request(request, names, payload_hash)
    to_sign = "\n".join(
        (ALGORITHM, stamp, "/".join((*scope, "aws4_request")),
         hashlib.sha256(canonical.encode()).hexdigest())
    )  # fmt: skip
    key = signing_key(secret, *scope)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _check_coverage(request: HttpRequest, names: list[str]) -> None:
    """The signature must cover Host and every X-Amz-* header sent, as AWS requires: one left
    out could be changed at will (a captured ReceiveMessage replayed as a PurgeQueue)."""
    if "host" not in names:
        raise errors.SignatureDoesNotMatch("The host header must be signed.")
    signed = set(names)
    unsigned = sorted(
        name
        for key in request.META
        if key.startswith(_AMZ_PREFIX)
        and (name := key[len("HTTP_") :].lower().replace("_", "-")) not in signed
    )
    if unsigned:
        raise errors.SignatureDoesNotMatch(
            "There were headers present in the request which were not signed: "
            f"{', '.join(unsigned)}."
        )


def _checked_date(request: HttpRequest, day: str, now: datetime) -> str:
    """X-Amz-Date (or, without it, Date): of the scope's day, within 15 minutes of our clock."""
    stamp = request.META.get("HTTP_X_AMZ_DATE", "")
    try:
        if stamp or "HTTP_DATE" not in request.META:
            signed_at = datetime.strptime(stamp, _DATE_FORMAT).replace(tzinfo=UTC)
        else:
            signed_at = parsedate_to_datetime(request.META["HTTP_DATE"]).astimezone(UTC)
            stamp = signed_at.strftime(_DATE_FORMAT)
    except (ValueError, TypeError):
        raise errors.SignatureDoesNotMatch(
            "X-Amz-Date (or Date) is missing or not a date."
        ) from None
    if stamp[:8] != day:
        raise errors.SignatureDoesNotMatch("The credential scope's date is not X-Amz-Date's.")
    skew = timedelta(seconds=limits.SIGNATURE_SKEW_S)
    if signed_at < now - skew:
        raise errors.SignatureDoesNotMatch(
            f"Signature expired: {stamp} is now earlier than {(now - skew).strftime(_DATE_FORMAT)}"
            f" ({now.strftime(_DATE_FORMAT)} - 15 min.)"
        )
    if signed_at > now + skew:
        raise errors.SignatureDoesNotMatch(
            f"Signature not yet current: {stamp} is still later than "
            f"{(now + skew).strftime(_DATE_FORMAT)} ({now.strftime(_DATE_FORMAT)} + 15 min.)"
        )
    return stamp


def canonical_request(request: HttpRequest, names: list[str], payload_hash: str) -> str:
    """SigV4's canonical request of what arrived: the path as sent, the headers as received
    (the Host the client used, whatever port or proxy is in between)."""
    headers = "".join(f"{name}:{_header(request, name)}\n" for name in names)
    return "\n".join(
        (
            request.method or "",
            canonical_path(request),
            canonical_query(request.META.get("QUERY_STRING", "")),
            headers,
            ";".join(names),
            payload_hash,
        )
    )


def canonical_path(request: HttpRequest) -> str:
    """The path as the client sent it (gunicorn's RAW_URI), without dot segments or repeated
    slashes (RFC 3986 5.2.4, as AWS's signers do), encoded once more."""
    raw = request.META.get("RAW_URI") or quote(request.path_info, safe="/~")
    path = raw.split("?", 1)[0]
    kept: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if kept:
                kept.pop()
        elif segment and segment != ".":
            kept.append(segment)
    lead = "/" if path.startswith("/") else ""
    trail = "/" if path.endswith("/") and kept else ""
    return quote(lead + "/".join(kept) + trail, safe="/~") or "/"


def canonical_query(query: str) -> str:
    """Each name and value encoded, sorted."""
    pairs = parse_qsl(query, keep_blank_values=True)
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))


def _header(request: HttpRequest, name: str) -> str:
    if name in ("content-type", "content-length"):
        key = name.upper().replace("-", "_")
    else:
        key = "HTTP_" + name.upper().replace("-", "_")
    return " ".join(str(request.META.get(key, "")).split())


@lru_cache(maxsize=256)
def signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    """The key derived for one day, region and service (cached: it changes once a day)."""
    key = ("AWS4" + secret).encode()
    for part in (day, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key
