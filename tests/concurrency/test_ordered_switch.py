"""`ordered` turned on while a queue is busy, on PostgreSQL with real threads (API.md "Keys": the
settings hold from the moment the PATCH is answered, for every task). Producers enqueue keyed
tasks and claimers take up to 100 at a time while the setting flips on and off: a claim that
starts after `ordered: true` is answered never takes a task of a key while another of that key is
handed out (those out at the switch included), nor before every earlier task of its key ended."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict

import pytest
from django.db import transaction

from broker import queue, queues
from broker.queue import NewTask
from tests.concurrency.conftest import in_thread
from tests.conftest import assert_invariant

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

Q = "ledger"
KEYS = [f"acct-{i:02}" for i in range(30)]
CYCLES = 6


class Watch:
    """The claimers' view: what each key has out now, when each task started and ended (its
    start noted after its claim returned, its end before its ack went), and what broke the
    contract in claims that started after an `ordered: true` was answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.out: Counter[str] = Counter()
        self.key_of: dict[int, str] = {}
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}
        self.checked: list[int] = []  # started by a claim that began with the queue ordered
        self.overlaps: list[tuple[str, int]] = []
        self.epoch = 0  # bumped as each PATCH is sent and as it is answered
        self.ordered = False  # answered true, and no PATCH sent since

    def begin(self) -> tuple[int, bool]:
        with self.lock:
            return self.epoch, self.ordered

    def took(self, begun: tuple[int, bool], pks_keys: list[tuple[int, str]]) -> None:
        with self.lock:
            checked = begun[1] and begun[0] == self.epoch
            for pk, key in pks_keys:
                if checked:
                    self.checked.append(pk)
                    if self.out[key]:
                        self.overlaps.append((key, pk))
                self.out[key] += 1
                self.key_of[pk] = key
                self.started[pk] = time.monotonic()

    def left(self, pk: int) -> None:
        with self.lock:
            self.out[self.key_of[pk]] -= 1
            self.ended[pk] = time.monotonic()

    def switch(self, ordered: bool) -> None:
        with self.lock:
            self.epoch += 1
            self.ordered = False
        queues.update(Q, {"ordered": ordered})
        with self.lock:
            self.epoch += 1
            self.ordered = ordered


def _busy_queue_with_switches(claim_limit: int) -> tuple[Watch, int]:
    watch, stop_producing, stop = Watch(), threading.Event(), threading.Event()
    errors: list[BaseException] = []
    enqueued: list[int] = []

    def producer(seed: int) -> None:
        rng = random.Random(seed)
        while not stop_producing.is_set():
            key = rng.choice(KEYS)
            pk, _ = queue.enqueue(NewTask(payload=json.dumps(key), queue=Q, key=key))
            enqueued.append(pk)

    def claimer(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            begun = watch.begin()
            got = queue.claim([Q], 60_000, limit=claim_limit)
            if got:
                watch.took(begun, [(d.task.pk, d.task.key or "") for d in got])
                time.sleep(rng.random() * 0.01)
                for d in rng.sample(got, len(got)):  # several of a key out: in any order
                    watch.left(d.task.pk)
                    queue.ack(d.task.pk, lease_id=d.lease_id)
            time.sleep(0.015)  # backlogs build up between claims: a claim takes several of a key

    producers = [in_thread(lambda s=s: producer(s), errors) for s in range(3)]
    threads = producers + [in_thread(lambda s=s: claimer(100 + s), errors) for s in range(3)]
    try:
        for _ in range(CYCLES):
            time.sleep(0.15)
            watch.switch(True)
            time.sleep(0.35)
            watch.switch(False)
        watch.switch(True)
        stop_producing.set()
        for thread in producers:
            thread.join(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and queue.totals()["acked"] < len(enqueued):
            time.sleep(0.05)
    finally:
        stop_producing.set()
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not errors, errors[0]
    return watch, len(enqueued)


def test_ordered_turned_on__while_enqueued_and_claimed__one_of_a_key_at_a_time_in_order() -> None:
    watch, enqueued = _busy_queue_with_switches(claim_limit=100)
    assert queue.totals()["acked"] == enqueued  # every task ran, none is stuck waiting
    assert len(watch.checked) > 50, len(watch.checked)  # the ordered windows saw real traffic
    assert watch.overlaps == [], watch.overlaps[:10]
    by_key: dict[str, list[int]] = defaultdict(list)
    for pk, key in watch.key_of.items():
        by_key[key].append(pk)
    late = []
    for pk in watch.checked:
        earlier = [e for e in by_key[watch.key_of[pk]] if e < pk]
        # Each earlier task of its key ended before this one started (no nacks here: a task
        # starts once, so none is a retry of one already out).
        late += [(e, pk) for e in earlier if watch.ended.get(e, 1e18) > watch.started[pk]]
    assert late == [], late[:10]
    assert_invariant()


def test_ordered_turned_on__while_an_enqueue_is_under_way__its_task_is_in_its_key_line() -> None:
    """The race made certain: an enqueue that read the queue as not ordered commits only after
    the PATCH has been sent (and, before the fix, answered); the key's next task still waits."""
    read, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    first: list[int] = []

    def enqueue_slowly() -> None:
        with transaction.atomic():
            pk, _ = queue.enqueue(NewTask(payload="1", queue=Q, key="acct-01"))
            first.append(pk)
            read.set()
            go.wait(10)

    slow = in_thread(enqueue_slowly, errors)
    assert read.wait(10)
    switch = in_thread(lambda: queues.update(Q, {"ordered": True}), errors)
    time.sleep(0.3)  # the PATCH reaches the tasks while the enqueue is still open
    go.set()
    slow.join(10)
    switch.join(10)
    assert not errors, errors[0]
    second, _ = queue.enqueue(NewTask(payload="2", queue=Q, key="acct-01"))
    got = queue.claim([Q], 60_000, limit=100)
    assert [d.task.pk for d in got] == first
    queue.ack(first[0], lease_id=got[0].lease_id)
    assert [d.task.pk for d in queue.claim([Q], 60_000, limit=100)] == [second]
