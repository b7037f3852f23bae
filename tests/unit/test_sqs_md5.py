"""SQS's MD5 digests: the message body's, and the message attributes' binary encoding."""

from __future__ import annotations

import base64

import pytest

from broker.sqs import errors
from broker.sqs.attributes import md5_hex, md5_of_attributes, message_attributes


def _s(value: str, data_type: str = "String") -> dict[str, str]:
    return {"DataType": data_type, "StringValue": value}


def _b(value: bytes, data_type: str = "Binary") -> dict[str, str]:
    return {"DataType": data_type, "BinaryValue": base64.b64encode(value).decode()}


# Digests SQS itself answered for these attributes (AWS's published samples, and SDK tests).
@pytest.mark.parametrize(
    ("attrs", "expected"),
    [
        (
            {
                "test_attribute_name_2": _s("test_attribute_value_2"),
                "test_attribute_name_1": _s("test_attribute_value_1"),
            },
            "d53f3b558fe951154770f25cb63dbba9",
        ),
        ({"test_attribute_name": _b(b"test_attribute_value")}, "23f6bd27ea87aab7dfeadcc9aebee495"),
        (
            {"ordinal": _s("1", "Number"), "category": _s("test")},
            "d21ae90c49061e927f57df5f5d72be1f",
        ),
        ({"SellerName": _s("Example Store")}, "cd28f3b68aeee4b2eac9c66f2f694b58"),
    ],
)
def test_md5_of_attributes__sqs_samples__same_digest(attrs: dict, expected: str) -> None:
    assert md5_of_attributes(attrs) == expected


def test_md5_of_attributes__order_of_names__ignored() -> None:
    a = {"b": _s("1"), "a": _b(b"\x00\x01")}
    assert md5_of_attributes(a) == md5_of_attributes(dict(reversed(list(a.items()))))


def test_md5_of_attributes__custom_type__type_name_hashed_whole() -> None:
    assert md5_of_attributes({"n": _s("1.5", "Number.float")}) != md5_of_attributes(
        {"n": _s("1.5", "Number")}
    )


def test_md5_hex__utf8_body__md5_of_its_bytes() -> None:
    assert md5_hex("hello é") == "47b154673aa7a62db585b1b4275d5baa"
    assert md5_hex("1") == "c4ca4238a0b923820dcc509a6f75849b"


def test_message_attributes__every_type__stored_and_sized() -> None:
    raw = {
        "s": _s("héllo"),
        "n": _s("-1.5e3", "Number"),
        "f": _s("2.5", "Number.float"),
        "b": _b(b"\x00\xff"),
        "c": _b(b"x", "Binary.gif"),
    }
    stored, size = message_attributes(raw)
    assert stored == raw
    names_and_types = sum(len(k) + len(v["DataType"]) for k, v in raw.items())
    assert size == names_and_types + len("héllo".encode()) + 6 + 3 + 2 + 1


@pytest.mark.parametrize(
    "raw",
    [
        {"AWS.x": _s("v")},
        {".x": _s("v")},
        {"a..b": _s("v")},
        {"a b": _s("v")},
        {"x": _s("v", "Text")},
        {"x": _s("", "String")},
        {"x": _s("abc", "Number")},
        {"x": {"DataType": "Binary", "BinaryValue": "***"}},
        {"x": {"DataType": "String"}},
        {"x": {"DataType": "String", "StringValue": "a", "StringListValues": ["a"]}},
        {f"a{i}": _s("v") for i in range(11)},
    ],
)
def test_message_attributes__refused__invalid_parameter_value(raw: dict) -> None:
    with pytest.raises(errors.InvalidParameterValue):
        message_attributes(raw)


def test_message_attributes__control_character__invalid_message_contents() -> None:
    with pytest.raises(errors.InvalidMessageContents):
        message_attributes({"x": _s("a\x00b")})


def test_system_attributes__only_aws_trace_header() -> None:
    assert message_attributes({"AWSTraceHeader": _s("Root=1")}, system=True)[0]
    with pytest.raises(errors.InvalidParameterValue):
        message_attributes({"Other": _s("x")}, system=True)
