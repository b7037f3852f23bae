"""The dashboard page keeps its charts' range and queue in its URL, and starts both its history
charts and its live rates chart from the broker's history: a reload shows what it showed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
from django.test import Client

from broker.dashboard.charts import RANGES, RATES_WINDOW_S

pytestmark = pytest.mark.django_db
PAGE = "/dashboard/"


def embedded(html: str, name: str) -> object:
    found = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', html, re.S)
    assert found is not None, f"no {name} in the page"
    return json.loads(found.group(1))


def history_section(html: str) -> str:
    found = re.search(r'<section class="dash-panel" id="history".*?</section>', html, re.S)
    assert found is not None
    return found.group(0)


def test_page__range_and_queue_in_the_url__charts_drawn_for_them(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")
    enqueue_task(queue="other")

    html = admin_client.get(f"{PAGE}?range=7d&queue=mail").content.decode()

    section = history_section(html)
    assert 'data-initial-range="7d"' in section and 'data-initial-queue="mail"' in section
    assert re.search(r'data-range="7d" aria-pressed="true"', section)
    assert re.search(r'data-range="1h" aria-pressed="false"', section)
    assert '<option value="mail" selected>mail</option>' in section
    assert '<option value="other">other</option>' in section
    history = embedded(html, "history-initial")
    assert history["step"] == 3600  # 7 days go by the hour
    assert [p["enqueued"] for p in history["points"]] == [1]  # mail's only
    assert embedded(html, "history-ranges") == RANGES


def test_page__no_range_in_the_url__the_last_hour_of_every_queue(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")
    enqueue_task(queue="other")

    html = admin_client.get(PAGE).content.decode()

    section = history_section(html)
    assert 'data-initial-range="1h"' in section and 'data-initial-queue=""' in section
    history = embedded(html, "history-initial")
    assert history["step"] == 60 and [p["enqueued"] for p in history["points"]] == [2]


@pytest.mark.parametrize(
    "query", ["range=2y", "range=", "queue=%00", "queue=a%20b", "range=7d&range=x"]
)
def test_page__range_or_queue_no_page_offers__ignored_not_an_error(
    admin_client: Client, query: str
) -> None:
    response = admin_client.get(f"{PAGE}?{query}")

    assert response.status_code == 200
    section = history_section(response.content.decode())
    assert re.search(r'data-initial-range="(1h|7d)"', section)


def test_page__queue_named_by_the_url_but_unknown__offered_and_chosen(admin_client: Client) -> None:
    section = history_section(admin_client.get(f"{PAGE}?queue=later").content.decode())

    assert '<option value="later" selected>later</option>' in section


def test_page__live_rates__start_from_the_minutes_of_history(
    admin_client: Client, enqueue_task: Callable[..., int]
) -> None:
    enqueue_task(queue="mail")

    html = admin_client.get(f"{PAGE}?queue=other&range=24h").content.decode()

    recent = embedded(html, "rates-initial")
    assert [p["enqueued"] for p in recent] == [1]  # every queue, whatever the charts show
    assert RATES_WINDOW_S == 300
