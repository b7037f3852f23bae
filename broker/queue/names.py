"""The list of queue names: every queue a task, a setting or SQS's CreateQueue named, in the order
first named (QueueName's id), as GET /queues pages it, newest first.

Moves never write here: an enqueue stays one statement. A task names a queue by moving its counter
rows (broker.queue.counters), so before anything reads or adds to the list, the names of counter
rows not listed yet are caught up, oldest counter row first; a name listed earlier was named
earlier, whichever way. The sweeper retires the counter rows of queues with nothing left
(counters.retire) only once their names are listed, so a name, once given, stays. Deltas (moves
made inside callers' transactions) are caught up before they are folded into counter rows.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

from broker.models import QueueName
from broker.queue.sqlparts import COUNTER_TABLE, DELTA_TABLE, RETIRED

# The names not listed yet, in the order first named: counter rows by their oldest row (then the
# deltas that moves inside callers' transactions left), then SQS queues made without a setting.
_UNLISTED = (
    "SELECT name, src FROM ("
    f" SELECT queue AS name, 0 AS src, min(id) AS first FROM {COUNTER_TABLE} GROUP BY queue"
    f" UNION ALL SELECT queue, 1, min(id) FROM {DELTA_TABLE} GROUP BY queue"
    " UNION ALL SELECT name, 2, 0 FROM broker_sqsqueue"
    f") AS s WHERE name <> %s AND NOT EXISTS (SELECT 1 FROM {QueueName._meta.db_table} AS n"
    " WHERE n.name = s.name) ORDER BY src, first, name"
)


_KNOWN = (
    f"SELECT (SELECT 1 FROM {QueueName._meta.db_table} WHERE name = %s UNION ALL"
    f" SELECT 1 FROM {COUNTER_TABLE} WHERE queue = %s UNION ALL"
    f" SELECT 1 FROM {DELTA_TABLE} WHERE queue = %s UNION ALL"
    " SELECT 1 FROM broker_sqsqueue WHERE name = %s LIMIT 1)"
)


def catch_up() -> int:
    """List the names that counter rows (or SQS queues) hold and the list does not, in the order
    first named; returns how many. One read when there are none."""
    with connection.cursor() as cursor:
        cursor.execute(_UNLISTED, [RETIRED])
        found: dict[str, bool] = {}
        for name, src in cursor.fetchall():
            found.setdefault(name, src < 2)
    if found:
        QueueName.objects.bulk_create(
            [QueueName(name=name, by_task=by_task) for name, by_task in found.items()],
            ignore_conflicts=True,
        )
    return len(found)


def catch_up_with(queues: Iterable[str]) -> None:
    """Catch up when any of these queues is not listed yet (counters.fold_deltas, before the
    deltas that name them become counter rows, which would list them in another order)."""
    wanted = set(queues)
    if wanted and QueueName.objects.filter(name__in=wanted).count() < len(wanted):
        catch_up()


def add(names: Iterable[str]) -> None:
    """List these names (a setting named them), after those named before them."""
    catch_up()
    QueueName.objects.bulk_create([QueueName(name=n) for n in names], ignore_conflicts=True)


def named_by_tasks(names: Iterable[str]) -> None:
    """Remember that tasks named these queues (their counter rows are being retired)."""
    QueueName.objects.filter(name__in=list(names), by_task=False).update(by_task=True)


def known(name: str) -> bool:
    """Whether anything ever named the queue: listed, or not yet but its counter rows (or an SQS
    queue) name it. One read, whatever the queues."""
    with connection.cursor() as cursor:
        cursor.execute(_KNOWN, [name] * 4)
        return cursor.fetchone()[0] is not None


def forget(name: str) -> None:
    """Unlist a queue only settings named (SQS's DeleteQueue); one a task named stays. Counter
    rows it still has list it again at the next catch-up."""
    QueueName.objects.filter(name=name, by_task=False).delete()


def newest(limit: int) -> list[str]:
    """The names of the `limit` queues named last, newest first."""
    catch_up()
    return list(QueueName.objects.order_by("-pk").values_list("name", flat=True)[:limit])
