"""Keys in admin: the task list's key column, ?key= filter and key: search, the waiting reasons
key_busy and key_full on a task's page, and fair, key_max_in_flight and ordered edited with the
other queue settings through broker.queues.update."""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape

import pytest
from django.test import Client
from django.urls import reverse

from broker import queue, queues
from broker.models import Queue, Task

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:broker_task_changelist")
DLQ = reverse("admin:broker_deadtask_changelist")
QUEUES = "/admin/broker/queue/"


def _change(pk: int) -> str:
    return reverse("admin:broker_task_change", args=[pk])


def _listed_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r"/admin/broker/(?:dead)?task/(\d+)/change/", html)]


def _waiting(html: str) -> str:
    found = re.search(r'<div class="readonly"><b class="broker-waiting">.*?</div>', html, re.S)
    assert found is not None, "no waiting reason on the page"
    return found.group(0)


# -- the task list ------------------------------------------------------------------------------


def test_task_list__key_column__links_to_that_keys_tasks(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(key="tenant acme/1")
    enqueue_task()

    html = admin_client.get(TASKS).content.decode()

    cells = re.findall(r'<td class="field-key_link">(.*?)</td>', html)
    assert cells == ["-", '<a href="/admin/broker/task/?key=tenant+acme%2F1" '
                         'title="tenant acme/1">tenant acme/1</a>']  # fmt: skip


def test_task_list__long_key__cut_in_the_column_whole_in_its_title(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(key="k" * 128)

    html = admin_client.get(TASKS).content.decode()

    assert f'title="{"k" * 128}">{"k" * 31}…</a>' in html


def test_task_list__key_filter__only_that_keys_tasks_and_shown_to_be_cleared(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    acme = [enqueue_task(key="acme"), enqueue_task(key="acme", queue="mail")]
    enqueue_task(key="acme-eu")
    enqueue_task()

    html = admin_client.get(TASKS, {"key": "acme"}).content.decode()

    assert sorted(_listed_ids(html)) == sorted(acme)
    assert "By key" in html and 'title="acme"' in html  # the chosen key, in the side bar


def test_task_list__no_key_chosen__no_key_choices_offered(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(key="acme")

    html = admin_client.get(TASKS).content.decode()

    assert "By key" not in html  # keys are too many to list; the column links to each


@pytest.mark.parametrize("term", ["key:acme", "acme"])
def test_task_list__search_a_key__exactly_its_tasks(
    admin_client: Client, enqueue_task: Callable[..., int], term: str
) -> None:
    acme = [enqueue_task(key="acme"), enqueue_task(key="acme", queue="mail")]
    enqueue_task(key="acme-eu")  # a longer key is another key
    enqueue_task(payload={"customer": "acme"})  # found by the plain word, not by key:

    html = admin_client.get(TASKS, {"q": term}).content.decode()

    listed = _listed_ids(html)
    assert set(acme) <= set(listed)
    assert len(listed) == (2 if term.startswith("key:") else 3)


def test_dlq__key_filter__that_keys_dead_tasks(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    keyed = enqueue_task(key="acme", max_attempts=1)
    enqueue_task(key="globex", max_attempts=1)
    for d in queue.claim(["default"], 30_000, limit=2):
        queue.nack(d.task.pk, lease_id=d.lease_id, error="boom")

    html = admin_client.get(DLQ, {"key": "acme"}).content.decode()

    assert _listed_ids(html) == [keyed]


# -- a task's page ------------------------------------------------------------------------------


def test_task_page__shows_its_key(admin_client: Client, enqueue_task: Callable[..., int]) -> None:
    pk = enqueue_task(key="tenant-acme")

    html = admin_client.get(_change(pk)).content.decode()

    assert re.search(r'<label>Key:</label>\s*<div class="readonly">tenant-acme</div>', html)


def test_task_page__ordered_key_busy__says_so_and_links_the_task_it_is_behind(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    queues.update("ledger", {"ordered": True})
    first = enqueue_task(queue="ledger", key="account-7")
    second = enqueue_task(queue="ledger", key="account-7")

    shown = _waiting(admin_client.get(_change(second)).content.decode())

    assert '<b class="broker-waiting">key_busy</b>' in shown
    assert f"Task {first} of its key 'account-7' is not finished" in unescape(shown)
    assert f'(behind <a href="{_change(first)}">#{first}</a>)' in shown


def test_task_page__key_full__says_so(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    queues.update("imports", {"key_max_in_flight": 1})
    enqueue_task(queue="imports", key="acme")
    waiting = enqueue_task(queue="imports", key="acme")
    (claimed,) = queue.claim(["imports"], 30_000, limit=5)
    assert claimed.task.pk != waiting

    shown = unescape(_waiting(admin_client.get(_change(waiting)).content.decode()))

    assert '<b class="broker-waiting">key_full</b>' in shown
    assert "Its key 'acme' has 1 task handed out, the queue's key_max_in_flight is 1." in shown


# -- queue settings -----------------------------------------------------------------------------


def test_queue_list__key_settings_shown(admin_client: Client) -> None:
    queues.update("ledger", {"ordered": True, "fair": True, "key_max_in_flight": 3})

    html = admin_client.get(QUEUES).content.decode()

    assert '<td class="field-fair"><img src="/static/admin/img/icon-yes.svg" alt="True">' in html
    assert '<td class="field-ordered"><img src="/static/admin/img/icon-yes.svg" alt="True">' in html
    assert 'name="form-0-key_max_in_flight" value="3"' in html  # editable in the list


def test_queue_change_form__key_settings_saved_through_update(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    queues.update("imports", {"rate_per_s": 5})
    calls = []
    real = queues.update
    monkeypatch.setattr(queues, "update", lambda n, c: calls.append((n, c)) or real(n, c))

    r = admin_client.post(
        f"{QUEUES}imports/change/",
        {"rate_per_s": "5", "fair": "on", "key_max_in_flight": "2", "ordered": "on"},
    )

    assert r.status_code == 302, r.content.decode()[:2000]
    assert calls == [("imports", {"fair": True, "key_max_in_flight": 2, "ordered": True})]
    row = Queue.objects.get(name="imports")
    assert (row.fair, row.key_max_in_flight, row.ordered) == (True, 2, True)


def test_queue_change_form__form_explains_the_key_settings(admin_client: Client) -> None:
    queues.update("imports", {})

    html = admin_client.get(f"{QUEUES}imports/change/").content.decode()

    assert "the next task is the oldest of the key served longest ago" in unescape(html)
    assert "At most this many tasks of one key handed out at once" in html
    assert "Per key, one task at a time, in enqueue order." in html


@pytest.mark.parametrize("value", ["0", "-1", "1000001"])
def test_queue_change_form__bad_key_max__error_nothing_saved(
    admin_client: Client, value: str
) -> None:
    queues.update("imports", {"key_max_in_flight": 4})

    r = admin_client.post(f"{QUEUES}imports/change/", {"key_max_in_flight": value})

    assert r.status_code == 200
    assert "errorlist" in r.content.decode()
    assert Queue.objects.get(name="imports").key_max_in_flight == 4


def test_queue_change_form__ordered_turned_off__waiting_tasks_claimable_at_once(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    queues.update("ledger", {"ordered": True})
    first = enqueue_task(queue="ledger", key="account-7")
    second = enqueue_task(queue="ledger", key="account-7")
    assert [d.task.pk for d in queue.claim(["ledger"], 30_000, limit=5)] == [first]

    r = admin_client.post(f"{QUEUES}ledger/change/", {})  # every box unticked: ordered off

    assert r.status_code == 302, r.content.decode()[:2000]
    assert Queue.objects.get(name="ledger").ordered is False
    assert Task.objects.get(pk=second).key_wait is False
    assert [d.task.pk for d in queue.claim(["ledger"], 30_000, limit=5)] == [second]


def test_queue_list_editable__key_max_saved_through_update(admin_client: Client) -> None:
    queues.update("imports", {})

    r = admin_client.post(
        QUEUES,
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-name": "imports",
         "form-0-key_max_in_flight": "5", "_save": "Save"},
    )  # fmt: skip

    assert r.status_code == 302, r.content.decode()[:3000]
    assert Queue.objects.get(name="imports").key_max_in_flight == 5
