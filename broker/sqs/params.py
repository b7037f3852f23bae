"""An action's parameters, read from the JSON body and refused with SQS's errors and sentences."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.parking.loop import Slot
from broker.sqs import errors, limits

_BATCH_ID = re.compile(f"[A-Za-z0-9_-]{{1,{limits.MAX_BATCH_ID}}}")


def text(body: dict[str, Any], name: str) -> str:
    """A required, non-empty string parameter."""
    value = body.get(name)
    if value is None or value == "":
        raise errors.MissingParameter(f"The request must contain the parameter {name}.")
    if not isinstance(value, str):
        raise errors.InvalidParameterValue(f"Value for parameter {name} must be a string.")
    return value


def integer(body: dict[str, Any], name: str, low: int, high: int, default: int | None) -> int:
    """An integer parameter in [low, high]; `default` when absent (None: required)."""
    value = body.get(name)
    if value is None:
        if default is None:
            raise errors.MissingParameter(f"The request must contain the parameter {name}.")
        return default
    if type(value) is not int:
        raise errors.InvalidParameterValue(
            f"Value {value!r} for parameter {name} is invalid. Reason: Must be an integer."
        )
    if not low <= value <= high:
        raise errors.InvalidParameterValue(
            f"Value {value} for parameter {name} is invalid. "
            f"Reason: Must be between {low} and {high}, if provided."
        )
    return value


def names(body: dict[str, Any], name: str) -> list[str]:
    """A list of strings (attribute names); absent is empty."""
    value = body.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.InvalidParameterValue(f"Value for parameter {name} must be a list of strings.")
    return value


def string_map(body: dict[str, Any], name: str) -> dict[str, str]:
    """A map of strings to strings (queue attributes, tags); absent is empty."""
    value = body.get(name, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise errors.InvalidParameterValue(
            f"Value for parameter {name} must be a map of strings to strings."
        )
    return value


def entries(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A batch's Entries: 1 to 10 objects whose Ids are well-formed and distinct."""
    found = body.get("Entries")
    if not found:
        raise errors.EmptyBatchRequest("There should be at least one entry in the request.")
    if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
        raise errors.InvalidParameterValue(
            "Value for parameter Entries must be a list of objects (one per entry)."
        )
    if len(found) > limits.MAX_BATCH:
        raise errors.TooManyEntriesInBatchRequest(
            f"Maximum number of entries per request are {limits.MAX_BATCH}. "
            f"You have sent {len(found)}."
        )
    seen: set[str] = set()
    for entry in found:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _BATCH_ID.fullmatch(entry_id):
            raise errors.InvalidBatchEntryId(
                "A batch entry id can only contain alphanumeric characters, hyphens and "
                f"underscores. It can be at most {limits.MAX_BATCH_ID} letters long."
            )
        if entry_id in seen:
            raise errors.BatchEntryIdsNotDistinct(f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return found


@dataclass(frozen=True, slots=True)
class Call:
    """One SQS request as an action sees it."""

    body: dict[str, Any]
    base_url: str  # scheme://host[/prefix] as the client reached us: queue URLs start with it
    path_queue: str | None  # the queue named by a POST to a queue URL, if any
    worker: str  # shown as a receive's holder (X-Broker-Worker's place): "sqs" or "sqs:<key id>"
    gone: Callable[[], bool]  # whether the client hung up (a parked receive stops)
    parking: Slot | None = None  # the parking worker's slot: a parked receive holds no thread
