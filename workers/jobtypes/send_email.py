"""send_email: pretends to send a mail (300 ms of simulated I/O) and logs it; nothing is sent."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from rest_framework import serializers

from workers.jobtypes import JobType
from workers.jobtypes._fields import PayloadSchema, StrictString

log = logging.getLogger(__name__)

SEND_SECONDS = 0.3


class EmailPayload(PayloadSchema):
    to = serializers.EmailField(max_length=254)
    subject = StrictString(max_length=998, default="", allow_blank=True, trim_whitespace=False)
    body = StrictString(max_length=100_000, default="", allow_blank=True, trim_whitespace=False)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Wait out the simulated I/O, log the mail; the result names the recipient."""
    time.sleep(SEND_SECONDS)
    message_id = uuid.uuid4().hex
    log.info("email %s to %s: %r (%d chars)", message_id, payload["to"], payload["subject"],
             len(payload["body"]))
    return {"sent_to": payload["to"], "message_id": message_id}


JOB_TYPE = JobType(
    name="send_email",
    schema=EmailPayload,
    run=run,
    description="Simulates sending a mail to `to` (300 ms, logged); subject, body optional.",
    sample=lambda broker_url: {"to": "ada@example.com", "subject": "hello", "body": "Hi Ada!"},
)
