"""The task list and page in admin: columns, filters, search, read-only detail, Cancel selected."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from broker import queue
from broker.models import Task, TaskError
from broker.states import Priority, State

TASKS = reverse("admin:broker_task_changelist")
pytestmark = pytest.mark.django_db


def _change(pk: int) -> str:
    return reverse("admin:broker_task_change", args=[pk])


def _listed_ids(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r"/admin/broker/task/(\d+)/change/", html)]


def _state(pk: int) -> str:
    return Task.objects.values_list("state", flat=True).get(pk=pk)


def test_task_list__columns__id_state_queue_type_priority_attempts_error_updated(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    error = 'Traceback (most recent call last):\n  File "job.py", line 3\nValueError: ' + "x" * 300
    pk = dead(1, error=error)[0]

    html = admin_client.get(TASKS).content.decode()

    headers = re.findall(r'<div class="text">(?:<a [^>]*>|<span>)([^<]+)<', html)
    assert headers == [
        "Id",
        "State",
        "Progress",
        "Queue",
        "Key",
        "Type",
        "Priority",
        "Attempts",
        "Last error",
        "Updated",
    ]
    assert f">#{pk}</a>" in html
    assert ">1/1<" in html
    # The error column shows a traceback's telling last line, cut short.
    row = re.search(r'<td class="field-error_preview">([^<]*)</td>', html)
    assert row is not None
    assert row.group(1) == "ValueError: " + "x" * 67 + "…"


def test_task_list__plain_error__first_line_shown(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    dead(1, error="connection refused\nwhile posting to https://hooks.example.org")
    html = admin_client.get(TASKS).content.decode()
    assert '<td class="field-error_preview">connection refused</td>' in html


def test_task_list__newest_first(admin_client: Client, enqueue_task: Callable[..., int]) -> None:
    ids = [enqueue_task() for _ in range(3)]
    assert _listed_ids(admin_client.get(TASKS).content.decode()) == ids[::-1]


@pytest.mark.parametrize(
    ("query", "expect"),
    [
        ("state__exact=ready", {"ready_mail"}),
        ("state__exact=dead", {"dead_default"}),
        ("queue=mail", {"ready_mail"}),
        (f"priority__exact={Priority.HIGH}", {"high_default"}),
        ("type=-", {"ready_mail", "dead_default", "high_default"}),
    ],
)
def test_task_list__filters(
    admin_client: Client,
    dead: Callable[..., list[int]],
    enqueue_task: Callable[..., int],
    query: str,
    expect: set[str],
) -> None:
    made = {"dead_default": dead(1)[0]}
    made["ready_mail"] = enqueue_task(queue="mail")
    made["high_default"] = enqueue_task(priority=Priority.HIGH)
    queue.claim(["default"], 30_000)  # the high-priority one, now handed out

    html = admin_client.get(f"{TASKS}?{query}").content.decode()

    assert set(_listed_ids(html)) == {made[name] for name in expect}


def test_task_list__filter_sidebar__offers_states_queues_and_types(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")
    enqueue_task(queue="billing")

    html = admin_client.get(TASKS).content.decode()

    for link in (
        "?state__exact=dead",
        "?queue=billing",
        "?queue=mail",
        "?type=-",
        "?priority__exact=0",
    ):
        assert f'href="{link}"' in html, link


@pytest.mark.parametrize("term", ["#{pk}", "order-42", "needle-in-payload", "disk full"])
def test_task_list__search__id_key_payload_and_error(
    admin_client: Client,
    dead: Callable[..., list[int]],
    enqueue_task: Callable[..., int],
    term: str,
) -> None:
    target = dead(1, error="disk full on /var", payload={"note": "needle-in-payload"})[0]
    Task.objects.filter(pk=target).update(idempotency_key="order-42")  # not a state field
    others = [enqueue_task(), enqueue_task(payload={"note": "hay"})]

    html = admin_client.get(TASKS, {"q": term.format(pk=target)}).content.decode()

    assert _listed_ids(html) == [target]
    assert not set(others) & set(_listed_ids(html))


@pytest.mark.parametrize(
    ("term", "found", "not_found"),
    [
        pytest.param(
            "billing",
            [{"queue": "billing"}, {"queue": "billing", "type": "send_email"}],
            [{"queue": "billing-eu"}, {"queue": "mail"}],  # a longer name is another queue
            id="queue_name__its_tasks_exactly",
        ),
        pytest.param(
            "send_email",
            [{"type": "send_email"}, {"queue": "mail", "type": "send_email"}],
            [{"queue": "mail", "type": "send_sms"}, {"queue": "mail"}],
            id="job_type_name__its_tasks_in_every_queue",
        ),
    ],
)
def test_task_list__search_a_name__exactly_its_tasks(
    admin_client: Client,
    enqueue_task: Callable[..., int],
    term: str,
    found: list[dict[str, str]],
    not_found: list[dict[str, str]],
) -> None:
    expected = [enqueue_task(**fields) for fields in found]
    for fields in not_found:
        enqueue_task(**fields)

    html = admin_client.get(TASKS, {"q": term}).content.decode()

    assert sorted(_listed_ids(html)) == sorted(expected)


def test_task_list__search_bare_number__the_task_with_that_id_and_text_matches(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    first = enqueue_task(payload={"order": "A"})
    enqueue_task(payload={"order": "B"})
    mentions = enqueue_task(payload={"order": f"#{first}"})

    html = admin_client.get(TASKS, {"q": str(first)}).content.decode()

    assert _listed_ids(html) == [mentions, first]


@pytest.mark.parametrize("matches", [0, 7, 50, 51, 120])
def test_task_list__search_over_pages__each_match_listed_once_newest_first_and_counted(
    admin_client: Client, enqueue_task: Callable[..., int], matches: int
) -> None:
    found = []
    for i in range(matches):
        if i % 3 == 0:
            enqueue_task(payload={"note": "hay"})
        found.append(enqueue_task(payload={"note": f"needle {i}"}))
    for _ in range(30):
        enqueue_task(payload={"note": "hay"})

    listed, pages = [], max(1, -(-matches // 50))
    for page in range(1, pages + 1):
        html = admin_client.get(TASKS, {"q": "NEEDLE", "p": page}).content.decode()
        listed += _listed_ids(html)
        assert re.search(rf"\b{matches} tasks?\b", html), page

    assert listed == found[::-1]


def test_task_page__payload_result_and_every_error_pretty_printed(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task(payload={"to": "ana@example.com", "lines": [1, 2]}, max_attempts=3)
    for error in ("first: timeout", "second: <refused>"):
        d = queue.claim(None, 30_000)[0]
        queue.nack(d.task.pk, lease_id=d.lease_id, error=error)
        Task.objects.filter(pk=pk).update(available_at=timezone.now())  # skip the backoff
        queue.promote_delayed()
    d = queue.claim(None, 30_000)[0]
    queue.ack(pk, lease_id=d.lease_id, result={"sent": True})

    raw = admin_client.get(_change(pk)).content.decode()
    html = unescape(raw)

    assert '{\n  "to": "ana@example.com",\n  "lines": [\n    1,\n    2\n  ]\n}' in html
    assert '{\n  "sent": true\n}' in html
    assert "first: timeout" in html
    assert "second: &lt;refused&gt;" in raw  # escaped, not markup
    assert re.search(r"<td>1</td>.*first: timeout.*<td>2</td>.*second", html, re.S)


def _reported(fraction: float | None, message: str | None, checkpoint: str | None = None) -> int:
    """A handed-out task whose holder reported (fraction, message, checkpoint JSON text)."""
    d = queue.claim(None, 30_000)[0]
    report = queue.Report(fraction=fraction, message=message, checkpoint=checkpoint)
    queue.progress(d.task.pk, lease_id=d.lease_id, report=report)
    return d.task.pk


def test_task_list__handed_out_with_a_report__progress_bar(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task()
    enqueue_task()
    enqueue_task()
    running = _reported(0.4, "row 40 of 100")
    silent = queue.claim(None, 30_000)[0].task.pk  # handed out, nothing reported yet
    finished = _reported(1.0, "all rows")
    queue.ack(finished, lease_id=Task.objects.get(pk=finished).lease_id)

    html = admin_client.get(TASKS).content.decode()

    cells = dict(re.findall(r"/task/(\d+)/change/.*?<td class=\"field-progress_bar\">(.*?)</td>",
                            html, re.S))  # fmt: skip
    assert '<progress class="broker-progress" max="1" value="0.4000"' in cells[str(running)]
    assert "40% row 40 of 100" in cells[str(running)]
    assert cells[str(silent)] == cells[str(finished)] == "-"  # Django's empty value


def test_task_page__progress_bar_and_checkpoint__then_kept_once_done(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task()
    pk = _reported(0.25, "page 3", checkpoint='{"page":3}')

    html = unescape(admin_client.get(_change(pk)).content.decode())
    assert '<progress class="broker-progress" max="1" value="0.2500"' in html
    assert "25% page 3" in html and "reported 20" in html
    assert '{\n  "page": 3\n}' in html

    queue.ack(pk, lease_id=Task.objects.get(pk=pk).lease_id)
    html = unescape(admin_client.get(_change(pk)).content.decode())
    assert "<progress" not in html
    assert "25% page 3 (last report" in html.replace("<small>", "")


def test_task_page__message_only__indeterminate_bar(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task()
    pk = _reported(None, "warming up <cache>")
    raw = admin_client.get(_change(pk)).content.decode()
    assert '<progress class="broker-progress" title="warming up &lt;cache&gt;"></progress>' in raw


def test_task_page__150_long_errors__newest_100_cut_and_said_so(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1, error="last: " + "y" * 19_994)[0]
    start = timezone.now() - timedelta(hours=1)
    # Older history as kept across requeues, written straight in (a fixture, not a transition).
    TaskError.objects.bulk_create(
        TaskError(task_id=pk, attempt=1, at=start + timedelta(seconds=i),
                  error=f"old {i:03} " + "x" * 19_992)
        for i in range(149)
    )  # fmt: skip
    TaskError.objects.filter(task_id=pk, error__startswith="last").update(at=timezone.now())

    response = admin_client.get(_change(pk))

    html = response.content.decode()
    assert "The newest 100 of 150 errors." in html
    assert "old 048 " not in html and "old 049 " in html and "last: y" in html
    # The history's newest 100, and the last error's own field above it.
    assert html.count("[cut: 20000 characters in all]") == 101
    assert html.count("y" * 16_378) == 1  # the last error: "last: " and y's, 16,384 characters
    assert "y" * 16_379 not in html
    assert len(response.content) < 2_500_000  # 150 whole errors would be 3 MB


def test_task_page__read_only__no_save_and_a_post_changes_nothing(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task()

    page = admin_client.get(_change(pk)).content.decode()
    response = admin_client.post(
        _change(pk), {"state": "done", "attempts": 9, "lease_id": "x", "_save": "Save"}
    )

    assert 'name="_save"' not in page
    assert 'name="state"' not in page
    assert response.status_code == 403
    task = Task.objects.get(pk=pk)
    assert (task.state, task.attempts, task.lease_id) == (State.READY, 0, None)


def test_task_admin__no_add_and_no_delete(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task()
    assert admin_client.get(reverse("admin:broker_task_add")).status_code == 403
    assert admin_client.post(reverse("admin:broker_task_delete", args=[pk])).status_code == 403
    html = admin_client.get(TASKS).content.decode()
    assert "delete_selected" not in html
    assert Task.objects.filter(pk=pk).exists()


def test_task_page__dead_task__links_to_its_dlq_page(
    admin_client: Client, dead: Callable[..., list[int]]
) -> None:
    pk = dead(1)[0]
    html = admin_client.get(_change(pk)).content.decode()
    assert f'href="{reverse("admin:broker_deadtask_change", args=[pk])}"' in html


def test_cancel_selected__live_tasks_cancelled_dead_left_alone(
    admin_client: Client, dead: Callable[..., list[int]], enqueue_task: Callable[..., int]
) -> None:
    gone = dead(1)[0]
    ready, later = enqueue_task(), enqueue_task(delay_ms=60_000)
    before = queue.totals()["cancelled"]

    response = admin_client.post(
        TASKS, {"action": "cancel_selected", "index": 0, "_selected_action": [gone, ready, later]}
    )

    assert [str(m) for m in get_messages(response.wsgi_request)] == ["2 tasks cancelled."]
    assert (_state(gone), _state(ready), _state(later)) == (
        State.DEAD,
        State.CANCELLED,
        State.CANCELLED,
    )
    assert queue.totals()["cancelled"] - before == 2


def test_view_only_staff__cancel_selected__not_offered_and_refused(
    user_with: Callable[..., Client], enqueue_task: Callable[..., int]
) -> None:
    pk = enqueue_task()
    client = user_with("view_task")

    html = client.get(TASKS).content.decode()
    client.post(TASKS, {"action": "cancel_selected", "index": 0, "_selected_action": [pk]})

    assert "cancel_selected" not in html
    assert _state(pk) == State.READY
    assert client.get(_change(pk)).status_code == 200  # may look, not touch


def test_staff_without_any_task_permission__task_list__403(
    user_with: Callable[..., Client],
) -> None:
    assert user_with().get(TASKS).status_code == 403
