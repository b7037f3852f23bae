"""broker_task's indexes: every one but the primary key is partial, so a task pays only for the
indexes of the states it passes through (a keyless task's enqueue, claim and ack touched three
full indexes more before 0017: the idempotency key's unique and LIKE ones, and the workflow's)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from broker.models import Task
from broker.queue import NewTask, enqueue

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'broker_task'")
        return dict(cursor.fetchall())


def test_every_index_but_the_primary_key__is_partial() -> None:
    full = {name for name, definition in _indexes().items() if " WHERE " not in definition}
    assert full == {"broker_task_pkey"}, _indexes()


def test_idempotency_key__unique_among_the_tasks_that_have_one() -> None:
    first, created = enqueue(NewTask(payload="{}", idempotency_key="k-1"))
    again, created_again = enqueue(NewTask(payload="{}", idempotency_key="k-1"))
    assert (created, created_again, again) == (True, False, first)
    keyless = [enqueue(NewTask(payload="{}"))[0] for _ in range(2)]  # never collide
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=keyless[0]).update(idempotency_key="k-1")
    assert Task.objects.filter(idempotency_key="k-1").count() == 1
    assert Task.objects.filter(idempotency_key__isnull=True).count() == 2
