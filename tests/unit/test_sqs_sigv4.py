"""Signature V4 verification: AWS's published vector, and requests signed by botocore itself."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.compat import HTTPHeaders
from botocore.credentials import Credentials
from django.test import RequestFactory

from broker.sqs import errors, sigv4

KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
BODY = b'{"QueueName": "q"}'


def test_signature__aws_get_vanilla_vector__the_published_signature() -> None:
    # AWS's SigV4 test suite, "get-vanilla": the signature AWS published for this request (its
    # scope names the service "service", which verify() refuses: the scope must name sqs).
    request = RequestFactory().get(
        "/", HTTP_HOST="example.amazonaws.com", HTTP_X_AMZ_DATE="20150830T123600Z"
    )
    got = sigv4.signature(
        request, ["host", "x-amz-date"], hashlib.sha256(b"").hexdigest(), SECRET,
        "20150830T123600Z", ("20150830", "us-east-1", "service"),
    )  # fmt: skip
    assert got == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"


@pytest.mark.parametrize(
    ("service", "region"),
    [("s3", "eu-west-3"), ("iam", "us-east-1"), ("service", "us-east-1"), ("SQS", "mars-1")],
)
def test_verify__signed_for_another_service__signature_does_not_match(
    service: str, region: str
) -> None:
    request = _request(_signed(service=service, region=region))
    with pytest.raises(errors.SignatureDoesNotMatch, match="scoped to correct service: 'sqs'"):
        sigv4.verify(request, BODY, {KEY: SECRET}, _now())


def test_verify__sqs_in_any_region__accepted() -> None:
    assert sigv4.verify(_request(_signed(region="mars-1")), BODY, {KEY: SECRET}, _now()) == KEY


def _signed(
    secret: str = SECRET,
    key: str = KEY,
    url: str = "http://127.0.0.1:8080/sqs",
    at: datetime | None = None,
    body: bytes = BODY,
    service: str = "sqs",
    region: str = "eu-west-3",
) -> dict[str, str]:
    """The headers botocore's own SigV4 signer puts on a request (SQS's by default)."""
    request = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.X"},
    )
    signer = SigV4Auth(Credentials(key, secret), service, region)
    if at is not None:
        import botocore.auth

        real = botocore.auth.get_current_datetime
        botocore.auth.get_current_datetime = lambda: at.replace(tzinfo=None)
        try:
            signer.add_auth(request)
        finally:
            botocore.auth.get_current_datetime = real
    else:
        signer.add_auth(request)
    return dict(request.headers.items())


def _request(headers: dict[str, str], path: str = "/sqs", body: bytes = BODY, query: str = ""):
    meta = {
        "HTTP_" + k.upper().replace("-", "_"): v
        for k, v in headers.items()
        if k.lower() not in ("content-type", "content-length")
    }
    meta["HTTP_HOST"] = headers.get("host", "127.0.0.1:8080")
    url = path + (f"?{query}" if query else "")
    return RequestFactory().post(url, data=body, content_type=headers["Content-Type"], **meta)


def _now() -> datetime:
    return datetime.now(UTC)


def test_verify__botocore_signed__key_id() -> None:
    assert sigv4.verify(_request(_signed()), BODY, {KEY: SECRET}, _now()) == KEY


def test_verify__queue_url_path_and_other_port__accepted() -> None:
    headers = _signed(url="http://localhost:9999/sqs/my-queue")
    request = _request({**headers, "host": "localhost:9999"}, path="/sqs/my-queue")
    assert sigv4.verify(request, BODY, {KEY: SECRET}, _now()) == KEY


def test_verify__unknown_key__invalid_client_token_id() -> None:
    with pytest.raises(errors.InvalidClientTokenId):
        sigv4.verify(_request(_signed(key="AKIDOTHER")), BODY, {KEY: SECRET}, _now())


def test_verify__wrong_secret__signature_does_not_match() -> None:
    with pytest.raises(errors.SignatureDoesNotMatch, match="does not match"):
        sigv4.verify(_request(_signed(secret="wrong")), BODY, {KEY: SECRET}, _now())


def test_verify__body_changed__signature_does_not_match() -> None:
    changed = BODY.replace(b"q", b"r")
    with pytest.raises(errors.SignatureDoesNotMatch):
        sigv4.verify(_request(_signed(), body=changed), changed, {KEY: SECRET}, _now())


def test_verify__host_changed__signature_does_not_match() -> None:
    request = _request({**_signed(), "host": "127.0.0.1:8081"})
    with pytest.raises(errors.SignatureDoesNotMatch):
        sigv4.verify(request, BODY, {KEY: SECRET}, _now())


@pytest.mark.parametrize("minutes", [-16, 16])
def test_verify__date_beyond_15_minutes__signature_does_not_match(minutes: int) -> None:
    at = _now() + timedelta(minutes=minutes)
    with pytest.raises(errors.SignatureDoesNotMatch, match=r"Signature (expired|not yet)"):
        sigv4.verify(_request(_signed(at=at)), BODY, {KEY: SECRET}, _now())


def test_verify__date_within_15_minutes__accepted() -> None:
    at = _now() - timedelta(minutes=14)
    assert sigv4.verify(_request(_signed(at=at)), BODY, {KEY: SECRET}, _now()) == KEY


@pytest.mark.parametrize("header", [None, "Bearer token", "AWS AKID:sig"])
def test_verify__no_sigv4_header__missing_authentication_token(header: str | None) -> None:
    headers = {k: v for k, v in _signed().items() if k != "Authorization"}
    if header:
        headers["Authorization"] = header
    with pytest.raises(errors.MissingAuthenticationToken):
        sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now())


def test_verify__malformed_header__signature_does_not_match() -> None:
    headers = {**_signed(), "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE"}
    with pytest.raises(errors.SignatureDoesNotMatch):
        sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now())


def test_canonical_query__sorted_and_encoded() -> None:
    assert sigv4.canonical_query("b=2&a=x y&a=1") == "a=1&a=x%20y&b=2"


def test_verify__date_header_instead_of_x_amz_date__accepted() -> None:
    # botocore signs with Date when the request already carries one.
    request = AWSRequest(
        method="POST",
        url="http://127.0.0.1:8080/sqs",
        data=BODY,
        headers={"Content-Type": "application/x-amz-json-1.0", "Date": "x"},
    )
    SigV4Auth(Credentials(KEY, SECRET), "sqs", "us-east-1").add_auth(request)
    headers = dict(request.headers.items())
    assert "X-Amz-Date" not in headers
    assert sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now()) == KEY


def test_verify__declared_payload_hash_not_the_body__signature_does_not_match() -> None:
    headers = {**_signed(), "X-Amz-Content-Sha256": "0" * 64}
    with pytest.raises(errors.SignatureDoesNotMatch, match="X-Amz-Content-Sha256"):
        sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now())


def _signed_over(names: list[str], target: str = "AmazonSQS.ReceiveMessage") -> dict[str, str]:
    """Headers of a request whose signature covers only `names` (and is right for them)."""
    request = AWSRequest(
        method="POST", url="http://127.0.0.1:8080/sqs", data=BODY,
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": target},
    )  # fmt: skip
    signer = SigV4Auth(Credentials(KEY, SECRET), "sqs", "eu-west-3")
    every = signer.headers_to_sign

    def only_names(request: AWSRequest) -> HTTPHeaders:
        kept = HTTPHeaders()
        for name, value in every(request).items():
            if name in names:
                kept[name] = value
        return kept

    signer.headers_to_sign = only_names  # type: ignore[method-assign]
    signer.add_auth(request)
    return dict(request.headers.items())


def test_verify__x_amz_target_not_signed__signature_does_not_match() -> None:
    # A ReceiveMessage signed over host and x-amz-date only, replayed as a PurgeQueue.
    headers = {**_signed_over(["host", "x-amz-date"]), "X-Amz-Target": "AmazonSQS.PurgeQueue"}
    with pytest.raises(errors.SignatureDoesNotMatch, match="x-amz-target"):
        sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now())


@pytest.mark.parametrize(
    "extra", ["X-Amz-Security-Token", "X-Amz-Content-Sha256", "X-Amz-Anything"]
)
def test_verify__any_x_amz_header_not_signed__signature_does_not_match(extra: str) -> None:
    headers = _signed()
    value = hashlib.sha256(BODY).hexdigest() if extra == "X-Amz-Content-Sha256" else "v"
    with pytest.raises(errors.SignatureDoesNotMatch, match=extra.lower()):
        sigv4.verify(_request({**headers, extra: value}), BODY, {KEY: SECRET}, _now())


def test_verify__every_x_amz_header_signed__accepted() -> None:
    names = ["content-type", "host", "x-amz-date", "x-amz-target"]
    assert sigv4.verify(_request(_signed_over(names)), BODY, {KEY: SECRET}, _now()) == KEY


def test_verify__host_not_signed__signature_does_not_match() -> None:
    headers = _signed_over(["x-amz-date", "x-amz-target"])
    with pytest.raises(errors.SignatureDoesNotMatch, match="host"):
        sigv4.verify(_request(headers), BODY, {KEY: SECRET}, _now())
