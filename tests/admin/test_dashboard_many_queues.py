"""The dashboard beside thousands of queues: its page and data stay the same size, and read the
same rows, however many queues clients named (sizes and rows, not time)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from broker.queue import counters
from tests.reads import finish_all, name_queues, rows_fetched

pytestmark = pytest.mark.django_db

PAGE, DATA = "/dashboard/", "/dashboard/data.json"
MANY = 2000


def test_data__thousands_of_queues_holding__the_busiest_rows_read_bounded(
    admin_client: Client,
) -> None:
    name_queues(150)
    some = admin_client.get(DATA)
    name_queues(MANY, "r")  # names as long as the first
    with rows_fetched() as seen:
        many = admin_client.get(DATA)
    assert many.status_code == 200
    body = many.json()
    assert len(body["queues"]) == counters.SHOWN_QUEUES
    assert body["gauges"]["ready"] == MANY + 150
    assert len(many.content) <= len(some.content) + 200
    assert seen.rows < counters.SHOWN_QUEUES + 50


def test_page__thousands_of_queues_named__a_bounded_choice_of_queues(
    admin_client: Client,
) -> None:
    name_queues(MANY)
    finish_all()
    name_queues(3, "live")
    html = admin_client.get(PAGE).content.decode()
    options = re.findall(r'<option value="([^"]*)">', html)
    assert len(options) <= 1 + 2 * counters.SHOWN_QUEUES  # "All queues", then the bounded list
    assert {"live00000", "live00001", "live00002"} <= set(options)
    assert len(html) < 200_000
