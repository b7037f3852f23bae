"""The DLQ in admin: the list, the requeue actions and button, and who may use them."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test import Client
from django.urls import reverse

from broker import queue
from broker.longpoll import claim_wait
from broker.models import Task
from broker.states import State
from tests.admin.factories import insert_dead

DLQ = reverse("admin:broker_deadtask_changelist")
pytestmark = pytest.mark.django_db


def _requeue_url(pk: int | str) -> str:
    return reverse("admin:broker_deadtask_requeue", args=[pk])


def _messages(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _states(ids: list[int]) -> dict[int, str]:
    return dict(Task.objects.filter(pk__in=ids).values_list("pk", "state"))


def _listed_ids(html: str) -> list[int]:
    # The id column links each row to its page: /admin/broker/deadtask/<id>/change/
    return [int(pk) for pk in re.findall(r"/admin/broker/deadtask/(\d+)/change/", html)]


def test_dlq_list__only_dead_tasks__newest_death_first(
    admin_client: Client, dead: Callable[..., list[int]], enqueue_task: Callable[..., int]
) -> None:
    first = dead(1, error="first to die")[0]
    second = dead(1, error="second to die")[0]
    alive = enqueue_task()

    response = admin_client.get(DLQ)

    assert response.status_code == 200
    assert _listed_ids(response.content.decode()) == [second, first]
    assert alive not in _listed_ids(response.content.decode())
    assert "second to die" in response.content.decode()


def test_admin_index__lists_the_dead_letter_queue(admin_client: Client) -> None:
    response = admin_client.get(reverse("admin:index"))
    assert f'href="{DLQ}"' in response.content.decode()
    assert "Dead-letter queue" in response.content.decode()


def test_requeue_selected__two_of_three__ready_again_counted_and_reported(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    a, b, c = dead(3)
    before = queue.totals()["requeued"]

    response = admin_client.post(
        DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [a, b]}
    )

    assert response.status_code == 302
    assert _states([a, b, c]) == {a: State.READY, b: State.READY, c: State.DEAD}
    assert queue.totals()["requeued"] - before == 2
    assert _messages(response) == ["2 tasks requeued."]
    task = Task.objects.get(pk=a)
    assert (task.attempts, task.last_error) == (0, None)
    assert task.error_history.count() == 1  # the history stays


def test_discard_selected__dead_to_cancelled__counted_never_claimed(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    a, b, c = dead(3)
    before = queue.totals()

    response = admin_client.post(
        DLQ, {"action": "discard_selected", "index": 0, "_selected_action": [a, b]}
    )

    assert _states([a, b, c]) == {a: State.CANCELLED, b: State.CANCELLED, c: State.DEAD}
    assert _messages(response) == ["2 tasks discarded."]
    after = queue.totals()
    assert after["cancelled"] - before["cancelled"] == 2
    assert after["requeued"] == before["requeued"]
    assert queue.claim(None, 30_000, limit=10) == []


def test_requeue_selected__some_no_longer_dead__says_so(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    a, b = dead(2)
    queue.requeue(a)  # elsewhere, after the page was shown

    response = admin_client.post(
        DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [a, b]}
    )

    assert _messages(response) == ["1 task requeued. 1 selected was no longer dead."]


def test_requeue_all_matching__queue_filter__only_that_queue_and_no_selection_needed(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    mail = dead(3, queue_name="mail")
    other = dead(2, queue_name="billing")

    response = admin_client.post(
        f"{DLQ}?queue=mail", {"action": "requeue_all_matching", "index": 0}
    )

    assert response.status_code == 302
    assert response["Location"] == f"{DLQ}?queue=mail"
    assert set(_states(mail).values()) == {State.READY}
    assert set(_states(other).values()) == {State.DEAD}
    assert _messages(response) == ["3 tasks requeued."]


def test_requeue_all_matching__filter_django_could_not_read__nothing_requeued(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    ids = dead(2)
    bad = admin_client.get(f"{DLQ}?died__year=2026")  # not a filter of this list
    assert bad.status_code == 302 and bad["Location"].endswith("?e=1")

    response = admin_client.post(
        f"{DLQ}?e=1", {"action": "requeue_all_matching", "index": 0}, follow=True
    )

    assert set(_states(ids).values()) == {State.DEAD}
    assert any("Nothing was requeued" in m for m in _messages(response))


def test_requeue_all_matching__search_term__only_matching_errors(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    timeouts = dead(2, error="upstream timeout after 30 s")
    refused = dead(2, error="connection refused")

    admin_client.post(f"{DLQ}?q=timeout", {"action": "requeue_all_matching", "index": 0})

    assert set(_states(timeouts).values()) == {State.READY}
    assert set(_states(refused).values()) == {State.DEAD}


def test_dlq_search__queue_name__lists_and_requeues_that_queues_dead_tasks(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    billing = dead(2, queue_name="billing")
    mail = dead(1, queue_name="mail")

    html = admin_client.get(DLQ, {"q": "billing"}).content.decode()
    admin_client.post(f"{DLQ}?q=billing", {"action": "requeue_all_matching", "index": 0})

    assert sorted(_listed_ids(html)) == sorted(billing)
    assert set(_states(billing).values()) == {State.READY}
    assert set(_states(mail).values()) == {State.DEAD}


def test_requeue_all_matching__from_the_bottom_action_bar__uses_that_bars_choice(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    ids = dead(2)
    response = admin_client.post(DLQ, {"action": ["", "requeue_all_matching"], "index": 1})
    assert _messages(response) == ["2 tasks requeued."]
    assert set(_states(ids).values()) == {State.READY}


def test_requeue_all_matching__10000_dead__batched_within_seconds(admin_client: Client) -> None:
    ids = insert_dead(10_000)
    before = queue.totals()["requeued"]

    start = time.monotonic()
    response = admin_client.post(DLQ, {"action": "requeue_all_matching", "index": 0})
    elapsed = time.monotonic() - start

    assert _messages(response) == ["10000 tasks requeued."]
    assert queue.totals()["requeued"] - before == 10_000
    assert Task.objects.filter(pk__in=ids, state=State.READY).count() == 10_000
    assert elapsed < 10, f"requeueing 10,000 tasks took {elapsed:.1f} s"


def test_requeue_button__dead_task__ready_and_back_to_the_list(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    page = admin_client.get(reverse("admin:broker_deadtask_change", args=[pk]))
    assert f'action="{_requeue_url(pk)}"' in page.content.decode()

    response = admin_client.post(_requeue_url(pk))

    assert response.status_code == 302
    assert response["Location"] == DLQ
    assert _states([pk]) == {pk: State.READY}
    assert _messages(response) == [
        f'Task <a href="/admin/broker/task/{pk}/change/">#{pk}</a> requeued: it is ready again.'
    ]


def test_requeue_button__task_no_longer_dead__warns_and_moves_nothing(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    queue.requeue(pk)
    before = queue.totals()["requeued"]

    response = admin_client.post(_requeue_url(pk))

    assert _messages(response) == [f"Task #{pk} is not in the dead-letter queue."]
    assert queue.totals()["requeued"] == before


def test_dlq_link_of_a_task_requeued_since__its_task_page_saying_so(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    (pk,) = dead(1)
    queue.requeue(pk)

    response = admin_client.get(reverse("admin:broker_deadtask_change", args=[pk]), follow=True)

    assert response.redirect_chain[-1][0] == reverse("admin:broker_task_change", args=[pk])
    assert _messages(response) == [f"Task #{pk} is no longer dead: it is ready."]
    for bad in ("99999999999999999999999", "007", "abc"):
        url = f"/admin/broker/deadtask/{bad}/change/"
        assert admin_client.get(url).status_code in (302, 404)  # Django's "doesn't exist"


@pytest.mark.parametrize("bad_id", ["abc", "99999999999999999999999"])
def test_requeue_button__not_a_task_id__warns(admin_client: Client, bad_id: str) -> None:
    response = admin_client.post(_requeue_url(bad_id))
    assert response.status_code == 302
    assert _messages(response) == [f"Task #{bad_id} is not in the dead-letter queue."]


def test_requeue_button__get__405_and_nothing_moves(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    r = admin_client.get(_requeue_url(pk))
    assert (r.status_code, r["Allow"], r["Content-Type"]) == (405, "POST", "application/json")
    assert "error" in r.json()
    assert _states([pk]) == {pk: State.DEAD}


@pytest.mark.django_db(transaction=True)  # the parked claim runs on its own connection
def test_requeue_selected__wakes_a_parked_claimer_at_once(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    got: dict = {}

    def park() -> None:
        start = time.monotonic()
        try:
            got["deliveries"] = claim_wait(None, lease_ms=30_000, wait_ms=10_000)
            got["waited"] = time.monotonic() - start
        finally:
            connection.close()  # this thread's own connection, or the test database stays busy

    parked = threading.Thread(target=park)
    parked.start()
    time.sleep(0.3)
    admin_client.post(DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [pk]})
    parked.join(15)

    assert [d.task.pk for d in got["deliveries"]] == [pk]
    assert got["deliveries"][0].task.attempts == 1
    assert got["waited"] < 3, f"the parked claim waited {got['waited']:.1f} s"


# -- who may do what -------------------------------------------------------------------------------


def test_view_only_staff__dlq_list__no_requeue_actions_or_button(
    user_with: Callable[..., Client], dead: Callable[..., list[int]]
) -> None:
    dead(1)
    client = user_with("view_deadtask")

    html = client.get(DLQ).content.decode()

    assert "requeue_selected" not in html
    assert "requeue_all_matching" not in html
    assert "Requeue all matching" not in html


def test_view_only_staff__posts_requeue_actions__nothing_moves(
    user_with: Callable[..., Client], dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    client = user_with("view_deadtask")

    client.post(DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [pk]})
    client.post(DLQ, {"action": "requeue_all_matching", "index": 0})
    button = client.post(_requeue_url(pk))

    assert button.status_code == 403
    assert _states([pk]) == {pk: State.DEAD}
    assert queue.totals()["requeued"] == 0


def test_change_permission_on_tasks_only__cannot_requeue_from_the_dlq(
    user_with: Callable[..., Client], dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    client = user_with("view_deadtask", "change_task")

    client.post(DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [pk]})

    assert _states([pk]) == {pk: State.DEAD}


def test_staff_with_change_permission__requeue_selected__moves(
    user_with: Callable[..., Client], dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    client = user_with("change_deadtask")

    response = client.post(
        DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [pk]}
    )

    assert _messages(response) == ["1 task requeued."]
    assert _states([pk]) == {pk: State.READY}


def test_non_staff__dlq__sent_to_the_login_page(
    user_with: Callable[..., Client], dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    client = user_with("view_deadtask", "change_deadtask", staff=False)

    listing = client.get(DLQ)
    action = client.post(DLQ, {"action": "requeue_selected", "index": 0, "_selected_action": [pk]})
    button = client.post(_requeue_url(pk))

    for response in (listing, action, button):
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")
    assert _states([pk]) == {pk: State.DEAD}
