"""send_email: pretends to send a mail (300 ms of simulated I/O) and logs it; nothing is sent."""

from __future__ import annotations

from rest_framework import serializers

from contract.fields import PayloadSchema, StrictString
from contract.jobtypes import JobSpec


class EmailPayload(PayloadSchema):
    to = serializers.EmailField(max_length=254)
    subject = StrictString(max_length=998, default="", allow_blank=True, trim_whitespace=False)
    body = StrictString(max_length=100_000, default="", allow_blank=True, trim_whitespace=False)
    json_schema_rules = {"to": {"pattern": r"^[^@\s]+@[^@\s]+$"}}


SPEC = JobSpec(
    name="send_email",
    schema=EmailPayload,
    description="Simulates sending a mail to `to` (300 ms, logged); subject, body optional.",
    sample=lambda broker_url: {"to": "ada@example.com", "subject": "hello", "body": "Hi Ada!"},
)
