"""contract/: limits as documented, task ids, queue names, error flattening, the fetch policy."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from broker.states import PRIORITY_BY_NAME
from contract import limits
from contract.errors import flatten
from contract.netpolicy import literal_address, refusal

ROOT = Path(__file__).resolve().parents[2]


def test_docs_limits__the_table_is_the_one_limits_py_makes() -> None:
    text = (ROOT / "docs" / "limits.md").read_text()
    table = re.search(r"<!-- limits:begin -->\n(.*)<!-- limits:end -->", text, re.DOTALL)
    assert table is not None
    assert table.group(1) == limits.markdown_table()


def test_priorities__the_brokers_in_claim_order() -> None:
    assert limits.PRIORITIES == tuple(sorted(PRIORITY_BY_NAME, key=PRIORITY_BY_NAME.get))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0", 0),
        ("7", 7),
        ("9" * 18, int("9" * 18)),
        ("9" * 19, None),
        ("07", None),
        ("-1", None),
        ("1\n", None),
        ("\u0663", None),
        ("", None),
        (7, None),
        (None, None),
    ],
)
def test_parse_task_id__canonical_decimals_only(raw: object, expected: int | None) -> None:
    assert limits.parse_task_id(raw) == expected


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("a.b-c_9", True),
        ("q" * 64, True),
        ("q" * 65, False),
        ("", False),
        ("a\n", False),
        ("a b", False),
        ("é", False),
    ],
)
def test_queue_re__fullmatch_is_the_rule(name: str, ok: bool) -> None:
    assert bool(limits.QUEUE_RE.fullmatch(name)) is ok


def test_nests_at_most__counts_the_outer_value_as_one() -> None:
    value: object = 1
    for _ in range(3):
        value = [value]
    assert limits.nests_at_most(value, 3)
    assert not limits.nests_at_most(value, 2)


def test_flatten__nested_detail__dotted_names_whole_object_named_by_caller() -> None:
    detail = {
        "jobs": [{}, {"max_attempts": ["Too big."]}],
        "non_field_errors": ["Bad body."],
        "queues": {0: ["Not a queue name."]},
    }
    assert flatten(detail) == {
        "jobs.1.max_attempts": ["Too big."],
        "body": ["Bad body."],
        "queues.0": ["Not a queue name."],
    }
    assert flatten({"non_field_errors": ["Not an object."]}, whole="") == {"": ["Not an object."]}


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "a loopback"),
        ("::1", "a loopback"),
        ("::ffff:127.0.0.1", "a loopback"),
        ("2002:7f00:1::", "a loopback"),
        ("0.0.0.0", "an unspecified"),  # noqa: S104
        ("::", "an unspecified"),
        ("169.254.169.254", "a link-local"),
        ("fe80::1", "a link-local"),
        ("10.0.0.1", "a private"),
        ("fd00::1", "a private"),
        ("224.0.0.1", "a multicast"),
        ("ff02::1", "a multicast"),
        ("::7f00:1", "a reserved"),
        ("100.64.0.1", "a non-public"),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_refusal__by_kind_of_address(address: str, kind: str | None) -> None:
    reason = refusal(ipaddress.ip_address(address))
    if kind is None:
        assert reason is None
    else:
        assert reason == (
            f"refused: {address} is {kind} address (not in BROKER_FETCH_ALLOWED_NETWORKS)"
        )


def test_refusal__allowed_network__passes_in_either_form() -> None:
    allowed = [ipaddress.ip_network("127.0.0.0/8")]
    assert refusal(ipaddress.ip_address("127.0.0.2"), allowed) is None
    assert refusal(ipaddress.ip_address("::ffff:127.0.0.2"), allowed) is None
    assert refusal(ipaddress.ip_address("::1"), allowed) is not None  # another network


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "::1"),
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("localhost", None),
        ("example.com", None),
        ("bücher.de", None),
    ],
)
def test_literal_address__what_the_resolver_would_read_as_an_address(
    host: str, address: str | None
) -> None:
    found = literal_address(host)
    assert (str(found) if found else None) == address
