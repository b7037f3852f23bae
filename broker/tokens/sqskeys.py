"""SQS access keys of tokens (`createtoken --sqs`): the secret Signature V4 needs, decrypted once
per process and kept in the token cache (broker.tokens.auth); each SQS action's grant."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from broker.sqs import errors
from broker.sqs.params import Call
from broker.sqs.queues import name_in_url
from broker.tokens import auth, making
from broker.tokens.grants import FULL, Access

# Each SQS action's class of grant, on the queue it names.
ACTIONS = {
    "CreateQueue": "manage", "SetQueueAttributes": "manage", "PurgeQueue": "manage",
    "DeleteQueue": "manage",
    "GetQueueUrl": "read", "GetQueueAttributes": "read", "ListQueues": "read",
    "SendMessage": "produce", "SendMessageBatch": "produce",
    "ReceiveMessage": "consume", "DeleteMessage": "consume", "DeleteMessageBatch": "consume",
    "ChangeMessageVisibility": "consume", "ChangeMessageVisibilityBatch": "consume",
}  # fmt: skip
_BY_NAME = frozenset({"CreateQueue", "GetQueueUrl"})


class Credentials:
    """BROKER_SQS_CREDENTIALS (every right) and the tokens' SQS keys, as sigv4.verify reads
    credentials: `get(key_id)` → the secret, or None for a key unknown, revoked or expired."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.entries: dict[str, auth._Entry] = {}

    def get(self, key_id: str) -> str | None:
        if key_id in self.env:
            return self.env[key_id]
        entry = _entry(key_id)
        if entry is None or entry.revoked or entry.access is None or entry.sqs_secret is None:
            return None
        if entry.expires_at is not None and entry.expires_at <= timezone.now():
            return None
        self.entries[key_id] = entry
        return entry.sqs_secret

    def access_of(self, key_id: str) -> Access:
        entry = self.entries.get(key_id)
        if key_id in self.env or entry is None or entry.access is None:
            return FULL
        auth.note_use(entry)
        return entry.access


def _entry(key_id: str) -> auth._Entry | None:
    """The token of an SQS key id, through the per-process cache."""
    cache = auth.cache()
    cache.refresh()
    slot = f"sqs:{key_id}"
    if slot in cache.entries:
        return cache.entries[slot]
    from broker.models import AccessToken

    row = AccessToken.objects.filter(sqs_key_id=key_id).first() if len(key_id) <= 32 else None
    found = None
    if row is not None:
        found = auth.entry_of(row)
        found.sqs_secret = making.decrypt(row.sqs_secret_encrypted)
    cache.remember(slot, found)
    return found


def _queue_of(action: str, call: Call) -> str | None:
    if action == "ListQueues":
        return None
    if action in _BY_NAME:
        name = call.body.get("QueueName")
        return name if isinstance(name, str) else None
    if "QueueUrl" in call.body or call.path_queue is None:
        url = call.body.get("QueueUrl")
        return name_in_url(url) if isinstance(url, str) else None
    return call.path_queue


def check(access: Access, action: str, call: Call) -> None:
    """SQS's refusal unless `access` may do `action` on the queue it names: a queue none of its
    grants names does not exist for it (QueueDoesNotExist); one named without the action is
    AccessDenied. A missing or malformed queue is left to the action's own check."""
    if access.everything:
        return
    kind = ACTIONS[action]
    name = _queue_of(action, call)
    if name is None:
        if action == "ListQueues":
            return  # its answer is cut to the granted queues (listed)
        raise errors.AccessDenied(f"This key has no grant to {kind} here.")
    if action != "CreateQueue" and not access.knows(name):
        raise errors.QueueDoesNotExist("The specified queue does not exist.")
    if not access.may(kind, name):
        raise errors.AccessDenied(f"This key has no grant to {kind} on queue {name!r}.")


def listed(access: Access, action: str, answer: dict[str, Any]) -> dict[str, Any]:
    """ListQueues' answer cut to the queues `access` may read."""
    if access.everything or action != "ListQueues" or "QueueUrls" not in answer:
        return answer
    urls = [u for u in answer["QueueUrls"] if access.may("read", name_in_url(u))]
    return {**answer, "QueueUrls": urls}
