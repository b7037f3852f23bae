"""The cost of a fair claim does not grow with the keys served (API.md "Keys"): keys with nothing
to claim (served and idle, or parked behind a long delay) go to sleep, and a claim's rounds walk
only the keys awake; a key put to sleep is woken by its next task, by an enqueue that raced the
sweeper's look, and at the time its delayed task is due (PostgreSQL)."""

from __future__ import annotations

import json
import re
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction

from broker import queue, queues
from broker.models import KeyState, Task
from broker.queue import NewTask, keyclaims, keys
from tests.concurrency.conftest import in_thread
from tests.conftest import Clock

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

IDLE, PARKED = 1500, 1500


@pytest.fixture(autouse=True)
def _sleep_walk_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """keys.sleep walks the rows by id from where its last call stopped, in this process: an
    earlier test's place is no place in this test's rows."""
    monkeypatch.setattr(keys, "_sleep_after", 0)


def _put(name: str, key: str | None, n: int = 1, **fields: object) -> list[int]:
    return queue.enqueue_many(
        [NewTask(payload=json.dumps(i), queue=name, key=key, **fields) for i in range(n)]
    )


def _sql(statement: str, *params: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def _plan(name: str, full: list[str] | None = None) -> str:
    """EXPLAIN ANALYZE of a fair round of one task, `full` the keys at key_max_in_flight."""
    full = sorted(full or [])
    params = {"queue": name, "most": 1, "full": full, "taken": [], "recent": [], "last": None,
              "los": ["", *full[:-1]] if full else [], "his": full,
              "above": full[-1] if full else ""}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, COSTS OFF) {keyclaims.FAIR_ROUND}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _probes(name: str) -> int:
    """How many keys a fair round of one task probes: the loops of its probe of one key's tasks
    (`broker_task t`), by whichever index the planner takes for these rows (task_key_claim_idx
    for a backlog; task_live_queue_idx when statistics say few tasks are ready)."""
    plan = _plan(name)
    found = re.search(r"Scan using \w+ on broker_task t \(actual [^)]* loops=(\d+)\)", plan)
    assert found, plan
    return int(found.group(1))


def test_fair_claim__keys_served_and_parked__not_walked_once_asleep() -> None:
    queues.update("f", {"fair": True})
    busy = _put("f", "busy", 20)
    # Keys served in the last minutes and idle since (rows kept for SERVED_KEEP), and keys
    # never served whose one task waits out a six-day delay: all before "busy" in the walk.
    _sql(
        "INSERT INTO broker_keystate (queue, key, served_at) SELECT 'f', 'idle' || g,"
        " now() - interval '5 minutes' FROM generate_series(1, %s) g",
        IDLE,
    )
    six_days = 6 * 86_400_000
    for start in range(0, PARKED, 500):
        queue.enqueue_many([NewTask(payload="1", queue="f", key=f"parked{i}", delay_ms=six_days)
                            for i in range(start, start + 500)])  # fmt: skip
    last_idle = KeyState.objects.get(key="idle1").served_at
    KeyState.objects.filter(key="busy").update(served_at=last_idle + timedelta(minutes=1))
    # Statistics taken now, not whenever autovacuum comes by (on a busy host, between the two
    # looks below): the plan is the one these rows get, each time.
    _sql("ANALYZE broker_task, broker_keystate")
    assert _probes("f") > IDLE + PARKED  # the walk as it was: every idle key probed
    while keys.sleep():  # from the first row (the fixture), round the table
        pass
    _sql("VACUUM ANALYZE broker_keystate")  # the rows' old index entries, as autovacuum clears them
    assert _probes("f") <= 2  # the keyless key "" (once made) and "busy"
    got = [d.task.pk for d in queue.claim(["f"], 60_000, limit=3)]
    assert got == busy[:3]


def test_sleep__a_key_asleep__woken_by_its_next_task_in_its_place() -> None:
    queues.update("f", {"fair": True})
    (a0,) = _put("f", "a")
    b0, b1 = _put("f", "b", 2)
    taken = queue.claim(["f"], 60_000, limit=2)
    assert [d.task.pk for d in taken] == [a0, b0]
    for d in taken:
        queue.ack(d.task.pk, lease_id=d.lease_id)
    served = KeyState.objects.get(key="a").served_at
    assert keys.sleep() == 1  # "a": no live task; "b" has one ready
    assert KeyState.objects.get(key="a").asleep_until is not None
    (a1,) = _put("f", "a")
    row = KeyState.objects.get(key="a")
    assert (row.asleep_until, row.served_at) == (None, served)  # awake, in its place
    # "a" was served before "b": its turn first.
    assert [d.task.pk for d in queue.claim(["f"], 60_000, limit=2)] == [a1, b1]


def test_sleep__a_parked_key__woken_when_its_task_is_due(clock: Clock) -> None:
    queues.update("f", {"fair": True})
    (later,) = _put("f", "later", delay_ms=60_000)
    (now,) = _put("f", "now")
    assert keys.sleep() == 1  # "later": only a delayed task, until it is due
    assert KeyState.objects.get(key="later").asleep_until is not None
    assert [d.task.pk for d in queue.claim(["f"], 60_000, limit=5)] == [now]
    clock.advance(60_001)
    assert queue.promote_delayed() == 1
    assert [d.task.pk for d in queue.claim(["f"], 60_000, limit=5)] == [later]


def test_sleep__an_enqueue_holding_the_keys_row__the_key_stays_awake() -> None:
    """The sweeper's look races an enqueue of the key: it waits for the enqueue's row lock,
    then sees the row changed and leaves it awake."""
    queues.update("f", {"fair": True})
    (first,) = _put("f", "k")
    _sql("UPDATE broker_task SET state = 'done' WHERE id = %s", first)  # the key: no live task
    upserted, go_on = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    made: list[int] = []

    def enqueue() -> None:
        with transaction.atomic():
            keys.hold([("f", "k")])  # what an enqueue does first: its key's row, locked
            upserted.set()
            assert go_on.wait(10)
            made.extend(_put("f", "k"))

    thread = in_thread(enqueue, errors)
    assert upserted.wait(10)
    slept: list[int] = []
    sleeper = in_thread(lambda: slept.append(keys.sleep()), errors)
    sleeper.join(0.5)
    assert sleeper.is_alive()  # waits for the enqueue's lock
    go_on.set()
    thread.join(10)
    sleeper.join(10)
    assert not errors, errors
    assert slept == [0]
    assert KeyState.objects.get(key="k").asleep_until is None
    assert [d.task.pk for d in queue.claim(["f"], 60_000)] == made


def test_fair_claim__a_full_keys_backlog__not_read_to_find_the_top_priority() -> None:
    """A tenant capped by key_max_in_flight with a big old backlog: the top priority of the other
    keys is found without reading the full key's tasks (a probe per range of keys)."""
    queues.update("f", {"fair": True, "key_max_in_flight": 1})
    big = _put("f", "big", 3000)
    ((first, lease),) = [(d.task.pk, d.lease_id) for d in queue.claim(["f"], 60_000)]
    assert first == big[0]
    (other,) = _put("f", "other")
    (free,) = _put("f", None)
    _sql("ANALYZE broker_task")
    plan = _plan("f", full=["big"])
    removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
    assert max(removed, default=0) < 10, plan
    # The keyless key's row was made by the first claim, before "other" appeared: it goes first.
    assert [d.task.pk for d in queue.claim(["f"], 60_000, limit=5)] == [free, other]
    queue.ack(first, lease_id=lease)


def test_fair_round__before_any_statistics__each_key_one_probe_of_its_index() -> None:
    """Tasks of 2000 keys just inserted, no ANALYZE since; the 1000 keys walked first have only
    low tasks: each of those probes for a normal one finds nothing by reading nothing (one
    descent of task_key_claim_idx, ended by the key), and the first key with one wins."""
    queues.update("f", {"fair": True})
    _sql(
        "INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,"
        " available_at, created_at, updated_at, key) SELECT 'ready', 'f', 1 + g %% 2, '1', 0, 3,"
        " now(), now(), now(), 'k' || (g %% 2000) FROM generate_series(1, 20000) g"
    )
    _sql(
        "INSERT INTO broker_keystate (queue, key, served_at) SELECT 'f', 'k' || g,"
        " now() - interval '1 day' * (1 + g %% 2) + interval '1 second' * g"
        " FROM generate_series(0, 1999) g"
    )  # odd keys (low tasks only) served longest ago
    plan = _plan("f")
    probe = re.search(r"task_key_claim_idx on broker_task t \(actual [^)]* loops=(\d+)\)", plan)
    assert probe and int(probe.group(1)) == 1001, plan
    removed = [int(n) for n in re.findall(r"Rows Removed by Filter: (\d+)", plan)]
    assert max(removed, default=0) < 10, plan
    buffers = explain_buffers("f")
    assert buffers < 10 * 1001, buffers


def explain_buffers(name: str) -> int:
    """Shared buffers a fair round of one task touches."""
    params = {"queue": name, "most": 1, "full": [], "taken": [], "recent": [], "last": None,
              "los": [], "his": [], "above": ""}  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {keyclaims.FAIR_ROUND}", params)
        (plan,) = cursor.fetchone()
    top = plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def test_sleep__a_delayed_unique_holder_debounced_sooner__its_key_stays_awake() -> None:
    """A debounce brings a pending unique task's time forward without touching its key's row:
    such a key is not put to sleep, and the task is handed out when it is due."""
    from broker.queue.base import Unique

    queues.update("f", {"fair": True})
    later = Unique(key="u", debounce_ms=3_600_000)
    (holder,) = queue.enqueue_many([NewTask(payload="1", queue="f", key="a", unique=later)])
    assert Task.objects.get(pk=holder).state == "delayed"
    assert keys.sleep() == 0
    assert KeyState.objects.get(key="a").asleep_until is None
    # The same unique key again, debounced 0 ms: the holder's time is now, ready at once.
    now = Unique(key="u", debounce_ms=0)
    queue.enqueue_many([NewTask(payload="2", queue="f", key="a", unique=now)])
    queue.promote_delayed()
    assert [d.task.pk for d in queue.claim(["f"], 60_000)] == [holder]
