"""Pure request parsing: query integers, ids, queue lists, JSON depth, timestamps; no database."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from broker.api import parsing
from broker.api.errors import ValidationFailed
from broker.api.representation import timestamp


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(None, 7), ("0", 0), ("5", 5), ("30000", 30_000), ("30001", 30_000), ("9" * 40, 30_000)],
)
def test_query_int__absent_default_present_capped(raw: str | None, expected: int) -> None:
    params = {} if raw is None else {"n": raw}
    assert parsing.query_int(params, "n", 7, cap=30_000) == expected


@pytest.mark.parametrize("raw", ["", "-1", "1.5", "1e3", "+2", " 2", "x", "\uff11", "0x10"])
def test_query_int__not_a_non_negative_integer__400_naming_it(raw: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parsing.query_int({"n": raw}, "n", 7)
    assert list(caught.value.fields) == ["n"]


def test_query_int__below_minimum__400() -> None:
    with pytest.raises(ValidationFailed):
        parsing.query_int({"lease_ms": "0"}, "lease_ms", 30_000, minimum=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", 1),
        ("123", 123),
        ("0", 0),
        ("01", None),
        ("-1", None),
        ("1.0", None),
        ("abc", None),
        ("", None),
        ("\u0661", None),
        ("9" * 19, None),
    ],
)
def test_task_id__only_canonical_decimals(raw: str, expected: int | None) -> None:
    assert parsing.task_id(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ("a", ["a"]),
        ("a,b", ["a", "b"]),
    ],
)
def test_queue_list__names(raw: str | None, expected: list[str] | None) -> None:
    assert parsing.queue_list(raw) == expected


@pytest.mark.parametrize("raw", ["a b", "a,b c", "a\n", "q" * 65, "ä", "", ",", "a,,b", "a,"])
def test_queue_list__bad_or_empty_name__400(raw: str) -> None:
    with pytest.raises(ValidationFailed):
        parsing.queue_list(raw)


@pytest.mark.parametrize(("depth", "ok"), [(1, True), (256, True), (257, False)])
def test_nesting_bound(depth: int, ok: bool) -> None:
    value = json.loads("[" * depth + "]" * depth)
    assert parsing._nests_at_most(value, 256) is ok
    assert parsing._nests_at_most({"k": value}, 257) is ok


def test_dump_json__ascii_escapes_keep_nul_and_any_unicode() -> None:
    value = {"s": "a\u0000b é 🎉", "n": [1, 2.5, None, True]}
    text = parsing.dump_json(value)
    assert text.isascii() and "\x00" not in text
    assert json.loads(text) == value


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 678_999, tzinfo=UTC), "2026-01-02T03:04:05.678Z"),
        (None, None),
    ],
)
def test_timestamp__rfc3339_utc_milliseconds(value: datetime | None, text: str | None) -> None:
    assert timestamp(value) == text
