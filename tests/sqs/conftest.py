"""SQS endpoint tests through Django's test client: sqs(action, body) → (status, JSON, response)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

Sqs = Callable[..., tuple[int, dict[str, Any], Any]]
JSON_1_0 = "application/x-amz-json-1.0"


@pytest.fixture
def sqs(client: Client) -> Sqs:
    """sqs("SendMessage", {...}, path="/sqs", **headers) as boto3 would send it, unsigned."""

    def call(
        action: str, body: dict[str, Any] | None = None, path: str = "/sqs", **headers: Any
    ) -> tuple[int, dict[str, Any], Any]:
        headers.setdefault("HTTP_X_AMZ_TARGET", f"AmazonSQS.{action}")
        headers.setdefault("content_type", JSON_1_0)
        raw = headers.pop("raw", None)
        data = raw if raw is not None else json.dumps(body or {})
        response = client.post(path, data=data, **headers)
        return response.status_code, json.loads(response.content or b"{}"), response

    return call


@pytest.fixture
def queue_url(sqs: Sqs) -> Callable[..., str]:
    """queue_url(name, **attributes) → the URL of a new SQS queue."""

    def make(name: str = "q", **attributes: str) -> str:
        status, body, _ = sqs("CreateQueue", {"QueueName": name, "Attributes": attributes})
        assert status == 200, body
        url: str = body["QueueUrl"]
        return url

    return make
