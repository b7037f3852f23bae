"""GET /queues, GET and PATCH /queues/{name}: settings beside the counter rows' gauges."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import patch

pytestmark = pytest.mark.django_db

PLAIN = {
    "paused": False, "max_in_flight": None, "rate_per_s": None, "fair": False,
    "key_max_in_flight": None, "ordered": False,
}  # fmt: skip
EMPTY = {"ready": 0, "handed_out": 0, "delayed": 0, "dead": 0, "blocked": 0}


def test_queues__none_named__empty_list(api_client) -> None:
    r = api_client.get("/queues")
    assert r.status_code == 200
    assert r.json() == {"results": [], "next": None}


def test_queues__named_by_tasks_and_settings__newest_named_first_with_gauges(
    api_client, put, take, set_queue
) -> None:
    put("mail", 3)
    put("billing", 1, delay_ms=60_000)
    take(["mail"])
    set_queue("reports", paused=True)
    r = api_client.get("/queues")
    assert r.status_code == 200
    assert r.json() == {
        "results": [
            {"name": "reports", **PLAIN, "paused": True, **EMPTY},
            {"name": "billing", **PLAIN, **EMPTY, "delayed": 1},
            {"name": "mail", **PLAIN, **EMPTY, "ready": 2, "handed_out": 1},
        ],
        "next": None,
    }


def test_queues__named_again__keeps_the_place_of_its_first_naming(
    api_client, put, take, set_queue
) -> None:
    put("a")
    set_queue("b", paused=True)
    put("c")
    put("a")
    set_queue("a", max_in_flight=3)
    from tests.api.conftest import ack_all

    ack_all(api_client, take(["a"], n=2))
    assert [q["name"] for q in api_client.get("/queues").json()["results"]] == ["c", "b", "a"]


def test_queues__more_than_a_page__next_walks_each_once_newest_first(api_client) -> None:
    from tests.reads import name_queues

    names = name_queues(120)
    r = api_client.get("/queues")
    body = r.json()
    assert [q["name"] for q in body["results"]] == names[::-1][:50]  # 50 by default
    seen = [q["name"] for q in body["results"]]
    pages = 1
    while body["next"] is not None:
        assert body["next"].startswith("http://testserver/queues?")
        body = api_client.get(body["next"]).json()
        seen += [q["name"] for q in body["results"]]
        pages += 1
    assert (pages, seen) == (3, names[::-1])


def test_queues__limit__given_or_capped_at_500(api_client) -> None:
    from tests.reads import name_queues

    name_queues(510)
    assert len(api_client.get("/queues?limit=7").json()["results"]) == 7
    capped = api_client.get("/queues?limit=100000").json()
    assert len(capped["results"]) == 500 and capped["next"] is not None


@pytest.mark.parametrize(
    "query", ["limit=0", "limit=-1", "limit=x", "limit=", "cursor=x", "cursor=", "cursor=1.5"]
)
def test_queues__bad_limit_or_cursor__400_names_it(api_client, query: str) -> None:
    r = api_client.get(f"/queues?{query}")
    assert r.status_code == 400
    assert list(r.json()["fields"]) == [query.split("=")[0]]


def test_queue__one__its_settings_and_gauges(api_client, put, set_queue) -> None:
    put("mail", 2)
    set_queue("mail", max_in_flight=5, rate_per_s=2.5)
    r = api_client.get("/queues/mail")
    assert r.status_code == 200
    assert r.json() == {
        "name": "mail", **PLAIN, "max_in_flight": 5, "rate_per_s": 2.5, **EMPTY,
        "ready": 2,
    }  # fmt: skip


@pytest.mark.parametrize("name", ["never-used", "a b", "x" * 65])
def test_queue__never_named__404(api_client, name: str) -> None:
    r = api_client.get(f"/queues/{name}")
    assert r.status_code == 404
    assert r.json() == {"error": "No such queue: no task and no setting ever named it."}


def test_queue__named_by_a_task_long_done__still_known(api_client, put, take) -> None:
    put("once")
    from tests.api.conftest import ack_all

    ack_all(api_client, take(["once"]))
    r = api_client.get("/queues/once")
    assert r.status_code == 200
    assert r.json() == {"name": "once", **PLAIN, **EMPTY}


def test_patch__new_name__creates_its_settings(api_client) -> None:
    r = patch(api_client, "/queues/fresh", {"paused": True})
    assert r.status_code == 200
    assert r.json() == {"name": "fresh", **PLAIN, "paused": True, **EMPTY}
    assert api_client.get("/queues/fresh").json()["paused"] is True


def test_patch__each_field_alone__changes_only_it(set_queue) -> None:
    set_queue("q", paused=True, max_in_flight=3, rate_per_s=10)
    assert set_queue("q", max_in_flight=None)["max_in_flight"] is None
    now = set_queue("q", paused=False)
    assert (now["paused"], now["max_in_flight"], now["rate_per_s"]) == (False, None, 10.0)
    assert set_queue("q", rate_per_s=None)["rate_per_s"] is None
    assert set_queue("q")["paused"] is False  # an empty body changes nothing


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"paused": None}, "paused"),
        ({"paused": "yes"}, "paused"),
        ({"paused": 1}, "paused"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_in_flight": 2.5}, "max_in_flight"),
        ({"max_in_flight": True}, "max_in_flight"),
        ({"max_in_flight": "3"}, "max_in_flight"),
        ({"max_in_flight": 10**9}, "max_in_flight"),
        ({"rate_per_s": 0}, "rate_per_s"),
        ({"rate_per_s": -1}, "rate_per_s"),
        ({"rate_per_s": False}, "rate_per_s"),
        ({"rate_per_s": "1"}, "rate_per_s"),
        ({"rate_per_s": 1e12}, "rate_per_s"),
        ({"pause": True}, "pause"),
        ({"fair": None}, "fair"),
        ({"fair": "yes"}, "fair"),
        ({"ordered": None}, "ordered"),
        ({"ordered": 1}, "ordered"),
        ({"key_max_in_flight": 0}, "key_max_in_flight"),
        ({"key_max_in_flight": "3"}, "key_max_in_flight"),
        ({"key_max_in_flight": 2.5}, "key_max_in_flight"),
        ({"paused": True, "max_inflight": 2}, "max_inflight"),
    ],
)
def test_patch__bad_field__400_and_nothing_changes(
    api_client, set_queue, body: dict[str, Any], field: str
) -> None:
    set_queue("q", max_in_flight=4)
    r = patch(api_client, "/queues/q", body)
    assert r.status_code == 400
    assert list(r.json()["fields"]) == [field]
    assert api_client.get("/queues/q").json() == {"name": "q", **PLAIN, "max_in_flight": 4, **EMPTY}


def test_patch__bad_field_for_a_new_name__creates_nothing(api_client) -> None:
    r = patch(api_client, "/queues/ghost", {"paused": None})
    assert r.status_code == 400
    assert api_client.get("/queues/ghost").status_code == 404


def test_patch__bad_name__400(api_client) -> None:
    r = patch(api_client, "/queues/a%20b", {"paused": True})
    assert r.status_code == 400
    assert list(r.json()["fields"]) == ["name"]


@pytest.mark.parametrize("body", ["[1]", "null", "not json"])
def test_patch__body_not_an_object__400(api_client, body: str) -> None:
    r = api_client.patch("/queues/q", body, content_type="application/json")
    assert r.status_code == 400
    assert "error" in r.json()


def test_queues__post_not_allowed__405_json(api_client) -> None:
    r = api_client.post("/queues/q", {}, format="json")
    assert r.status_code == 405
    assert "error" in r.json()


def test_queues__created_over_sqs__listed_before_its_first_message(api_client) -> None:
    from django.utils import timezone

    from broker.models import SqsQueue

    now = timezone.now()
    SqsQueue.objects.create(name="orders", created_at=now, updated_at=now)
    assert api_client.get("/queues").json() == {
        "results": [{"name": "orders", **PLAIN, **EMPTY}],
        "next": None,
    }
    assert api_client.get("/queues/orders").status_code == 200
