"""Message attributes: SQS's rules for names, types and values, their size, and SQS's MD5s."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Mapping
from typing import Any

from broker.sqs import errors, limits

Attributes = dict[str, dict[str, str]]  # name → {"DataType", "StringValue" | "BinaryValue"}

# The characters SQS takes in a body or a string value (XML 1.0's), as a search for any other.
_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ALLOWED_SET = "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"
_NAME = re.compile(f"[A-Za-z0-9_.-]{{1,{limits.MAX_ATTRIBUTE_NAME}}}")
_TYPES = ("String", "Number", "Binary")
SYSTEM_NAMES = frozenset({"AWSTraceHeader"})


def check_text(value: str, where: str) -> None:
    """Refuse text holding a character SQS does not take (InvalidMessageContents)."""
    found = _REFUSED.search(value)
    if found:
        raise errors.InvalidMessageContents(
            f"Invalid binary character '#x{ord(found.group()):X}' was found in the {where}, "
            f"the set of allowed characters is {_ALLOWED_SET}"
        )


def message_attributes(raw: Any, *, system: bool = False) -> tuple[Attributes, int]:
    """Validated (MessageAttributes or MessageSystemAttributes, their size in bytes)."""
    kind = "message system attribute" if system else "message attribute"
    if not isinstance(raw, dict):
        raise errors.InvalidParameterValue(f"The {kind}s must be a map.")
    if len(raw) > limits.MAX_MESSAGE_ATTRIBUTES:
        raise errors.InvalidParameterValue(
            f"Number of message attributes [{len(raw)}] exceeds the allowed maximum "
            f"[{limits.MAX_MESSAGE_ATTRIBUTES}]."
        )
    found: Attributes = {}
    size = 0
    for name, value in raw.items():
        _check_name(name, system)
        found[name], value_size = _attribute(name, value, kind)
        size += len(name.encode()) + len(found[name]["DataType"].encode()) + value_size
    return found, size


def _check_name(name: str, system: bool) -> None:
    if system:
        if name not in SYSTEM_NAMES:
            raise errors.InvalidParameterValue(
                f"Message system attribute name '{name}' is invalid."
            )
        return
    lowered = name.lower()
    if (
        not _NAME.fullmatch(name)
        or lowered.startswith(("aws.", "amazon."))
        or name.startswith(".")
        or name.endswith(".")
        or ".." in name
    ):
        raise errors.InvalidParameterValue(
            f"Message (user) attribute '{name}' is invalid: a name is 1 to 256 of A-Z a-z 0-9 _ - "
            ". without a leading, trailing or repeated '.', and does not start with AWS. or Amazon."
        )


def _attribute(name: str, value: Any, kind: str) -> tuple[dict[str, str], int]:
    """One attribute in its stored form, and the size of its value."""
    data_type = value.get("DataType") if isinstance(value, dict) else None
    if not isinstance(data_type, str) or not data_type:
        raise errors.InvalidParameterValue(f"The {kind} '{name}' must contain a DataType.")
    base, dot, custom = data_type.partition(".")
    if base not in _TYPES or (dot and not custom) or len(data_type) > limits.MAX_ATTRIBUTE_NAME:
        raise errors.InvalidParameterValue(
            f"The {kind} '{name}' has an invalid message attribute type, the set of supported "
            "type prefixes is Binary, Number, and String."
        )
    check_text(data_type, f"{kind} type of '{name}'")
    if value.get("StringListValues") or value.get("BinaryListValues"):
        raise errors.InvalidParameterValue(
            f"The {kind} '{name}': StringListValues and BinaryListValues are not supported."
        )
    if base == "Binary":
        return _binary(name, value, data_type, kind)
    text_value = value.get("StringValue")
    if not isinstance(text_value, str) or not text_value or "BinaryValue" in value:
        raise errors.InvalidParameterValue(
            f"The {kind} '{name}' must contain non-empty message attribute value for message "
            f"attribute type '{base}'."
        )
    check_text(text_value, f"{kind} value of '{name}'")
    if base == "Number" and not is_number(text_value):
        raise errors.InvalidParameterValue(
            f"Can't cast the value of message (user) attribute '{name}' to a number."
        )
    return {"DataType": data_type, "StringValue": text_value}, len(text_value.encode())


def is_number(text: str) -> bool:
    """Whether `text` is a decimal number as SQS reads a Number value: a sign, ASCII digits with
    a point anywhere in them (`1`, `1.`, `.5`), an exponent (`e-3`). Read piece by piece, each
    character a bounded number of times: a regular expression's `\\d+\\.?\\d*` tried every split
    of a run of digits, time quadratic in the value's length, before its size was checked."""
    if not text.isascii():
        return False
    mantissa, e, exponent = text.lower().partition("e")
    whole, _, fraction = _unsigned(mantissa).partition(".")
    return (
        bool(whole or fraction)
        and all(part.isdigit() for part in (whole, fraction) if part)
        and (not e or _unsigned(exponent).isdigit())
    )


def _unsigned(text: str) -> str:
    return text[1:] if text[:1] in ("+", "-") else text


def _binary(name: str, value: dict, data_type: str, kind: str) -> tuple[dict[str, str], int]:
    encoded = value.get("BinaryValue")
    try:
        raw = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if not raw or "StringValue" in value:
        raise errors.InvalidParameterValue(
            f"The {kind} '{name}' must contain non-empty message attribute value for message "
            "attribute type 'Binary'."
        )
    return {"DataType": data_type, "BinaryValue": base64.b64encode(raw).decode()}, len(raw)


def md5_hex(text: str) -> str:
    """MD5OfMessageBody / MD5OfBody: the MD5 of the body's UTF-8 bytes."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def md5_of_attributes(attributes: Mapping[str, Mapping[str, str]]) -> str:
    """MD5OfMessageAttributes as SQS computes it: for each name in order, the name, the type and
    the value, each as a 4-byte big-endian length and its bytes (UTF-8 text), the value preceded
    by its transport type (1: String and Number, 2: Binary)."""
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        _put(digest, name.encode("utf-8", "surrogatepass"))
        _put(digest, value["DataType"].encode("utf-8", "surrogatepass"))
        if "BinaryValue" in value:
            digest.update(b"\x02")
            _put(digest, base64.b64decode(value["BinaryValue"]))
        else:
            digest.update(b"\x01")
            _put(digest, value["StringValue"].encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _put(digest: Any, data: bytes) -> None:
    digest.update(struct.pack(">I", len(data)))
    digest.update(data)
