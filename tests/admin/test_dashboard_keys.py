"""The dashboard's busiest keys: per fair, ordered or per-key-capped queue, the keys with the most
tasks ready and handed out, counted in one statement and shared for a few seconds."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from broker import queue, queues
from broker.dashboard import keys
from broker.queue import NewTask

DATA = "/dashboard/data.json"
pytestmark = pytest.mark.django_db


def _enqueue(queue_name: str, *task_keys: str | None) -> None:
    queue.enqueue_many([NewTask(payload="{}", queue=queue_name, key=k) for k in task_keys])


def _row(key: str | None, ready: int, handed_out: int, queue_name: str) -> dict[str, object]:
    url = None if key is None else f"/admin/broker/task/?queue={queue_name}&key={key}"
    return {"key": key, "ready": ready, "handed_out": handed_out, "url": url}


def test_data__fair_queue__keys_by_tasks_ready_plus_handed_out(admin_client: Client) -> None:
    queues.update("imports", {"fair": True})
    _enqueue("imports", "acme", "acme", "acme", "globex", "globex", None, "initech")
    queue.claim(["imports"], 30_000, limit=3)  # fair: one of acme, globex and the keyless

    top = admin_client.get(DATA).json()["top_keys"]

    assert top == {
        "imports": {
            "keys": 4,
            "top": [
                _row("acme", 2, 1, "imports"),
                _row("globex", 1, 1, "imports"),
                _row(None, 0, 1, "imports"),  # ties: more handed out first, then by key
                _row("initech", 1, 0, "imports"),
            ],
        }
    }


def test_data__each_kind_of_keyed_queue_listed_plain_ones_not(admin_client: Client) -> None:
    queues.update("imports", {"key_max_in_flight": 1})
    queues.update("ledger", {"ordered": True})
    queues.update("mail", {"max_in_flight": 3})
    _enqueue("imports", "acme", "acme")
    _enqueue("ledger", "account-7", "account-7", "account-9")
    _enqueue("mail", "someone")
    queue.claim(["imports", "ledger"], 30_000, limit=10)

    top = admin_client.get(DATA).json()["top_keys"]

    assert top == {
        # The second acme task waits: the key is full.
        "imports": {"keys": 1, "top": [_row("acme", 1, 1, "imports")]},
        # The second account-7 entry waits for the first: ready, not claimable, still counted.
        "ledger": {"keys": 2, "top": [_row("account-7", 1, 1, "ledger"),
                                      _row("account-9", 0, 1, "ledger")]},
    }  # fmt: skip


def test_data__keyed_queue_with_no_live_task__listed_empty(admin_client: Client) -> None:
    queues.update("ledger", {"ordered": True})

    assert admin_client.get(DATA).json()["top_keys"] == {"ledger": {"keys": 0, "top": []}}


def test_data__many_keys__the_ten_busiest_and_how_many_in_all(admin_client: Client) -> None:
    queues.update("imports", {"fair": True})
    _enqueue("imports", *[f"tenant-{n:02}" for n in range(14) for _ in range(n + 1)])

    top = admin_client.get(DATA).json()["top_keys"]["imports"]

    assert top["keys"] == 14
    assert [(k["key"], k["ready"]) for k in top["top"]] == [
        (f"tenant-{n:02}", n + 1) for n in range(13, 3, -1)
    ]


def test_top_keys__one_statement_over_tasks__then_shared_until_the_cache_expires() -> None:
    queues.update("imports", {"fair": True})
    _enqueue("imports", "acme")

    with CaptureQueriesContext(connection) as first:
        before = keys.top_keys()
    _enqueue("imports", "acme")
    with CaptureQueriesContext(connection) as second:
        again = keys.top_keys()

    over_tasks = [q["sql"] for q in first.captured_queries if "broker_task" in q["sql"]]
    assert len(over_tasks) == 1
    assert not [q for q in second.captured_queries if "broker_task" in q["sql"]]
    assert again == before  # the cached count, a few seconds old at most
    cache.delete(keys.TOP_KEYS_CACHE_KEY)
    assert keys.top_keys()["imports"]["top"][0]["ready"] == 2


def test_top_keys__a_queue_made_fair__counted_at_once_despite_the_cache() -> None:
    queues.update("imports", {"fair": True})
    _enqueue("ledger", "account-7")
    keys.top_keys()

    queues.update("ledger", {"ordered": True})

    assert keys.top_keys()["ledger"]["top"] == [_row("account-7", 1, 0, "ledger")]


def test_top_keys__key_with_url_characters__link_quoted() -> None:
    queues.update("imports", {"fair": True})
    _enqueue("imports", "a&b c/é")

    (row,) = keys.top_keys()["imports"]["top"]

    assert row["url"] == "/admin/broker/task/?queue=imports&key=a%26b+c%2F%C3%A9"


def test_dashboard_page__keys_panel_and_the_first_snapshots_keys(admin_client: Client) -> None:
    queues.update("imports", {"fair": True})
    _enqueue("imports", "acme")

    html = admin_client.get("/dashboard/").content.decode()

    assert '<section class="dash-panel" id="keys-panel" hidden>' in html
    initial = html.split('<script id="dashboard-initial" type="application/json">')[1]
    snap = json.loads(initial.split("</script>")[0])
    assert snap["top_keys"]["imports"]["top"] == [_row("acme", 1, 0, "imports")]
