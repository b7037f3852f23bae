"""send_email's handler: pretends to send a mail (300 ms of simulated I/O) and logs it."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from contract.jobtypes.send_email import SPEC
from workers import handler

log = logging.getLogger(__name__)

SEND_SECONDS = 0.3


@handler(SPEC.name, schema=SPEC)
def run(payload: dict[str, Any]) -> dict[str, Any]:
    """Wait out the simulated I/O, log the mail; the result names the recipient."""
    time.sleep(SEND_SECONDS)
    message_id = uuid.uuid4().hex
    log.info(
        "email %s to %s: %r (%d chars)",
        message_id,
        payload["to"],
        payload["subject"],
        len(payload["body"]),
    )
    return {"sent_to": payload["to"], "message_id": message_id}
