"""The dashboard's keys: in each fair, ordered or per-key-capped queue, the keys with the most
tasks ready and handed out, counted in one grouped read shared by every open dashboard."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.db.models import Count, F, Q, Value, Window
from django.db.models.functions import Coalesce, RowNumber
from django.urls import reverse

from broker.models import Queue, Task
from broker.queue import counters
from broker.states import State

# Queues whose settings go by key (RESTRICTED leaves `ordered` out: it holds back no claim scan).
KEYED = Q(fair=True) | Q(ordered=True) | Q(key_max_in_flight__isnull=False)
TOP_KEYS = 10
# Grouping every live task of the keyed queues by key is the costly read (about as costly as
# the top errors'): many open dashboards share one, for a few seconds.
TOP_KEYS_CACHE_S = 10
TOP_KEYS_CACHE_KEY = "broker:dashboard:top-keys"
COUNTED = (State.READY, State.HANDED_OUT)


def keyed_queues() -> list[str]:
    """The queues whose settings share, cap or order their tasks by key: the first SHOWN_QUEUES
    by name (every SQS queue is fair, and clients may make thousands)."""
    keyed = Queue.objects.filter(KEYED).order_by("name").values_list("name", flat=True)
    return list(keyed[: counters.SHOWN_QUEUES])


def top_keys() -> dict[str, dict[str, Any]]:
    """{queue: {"keys": how many keys have tasks ready or handed out, "top": the TOP_KEYS with
    the most, each {"key" (None: the tasks without one), "ready", "handed_out", "url"}}}, for
    every keyed queue (an empty one too)."""
    names = keyed_queues()
    # A queue just made fair shows at once, its keys counted afresh.
    cached = cache.get(TOP_KEYS_CACHE_KEY)
    if cached is None or cached[0] != names:
        cached = (names, _count(names) if names else [])
        cache.set(TOP_KEYS_CACHE_KEY, cached, TOP_KEYS_CACHE_S)
    shown: dict[str, dict[str, Any]] = {name: {"keys": 0, "top": []} for name in names}
    tasks = reverse("admin:broker_task_changelist")
    for queue_name, key, ready, handed_out, keys in cached[1]:
        shown[queue_name]["keys"] = keys
        link = None if key is None else f"{tasks}?{urlencode({'queue': queue_name, 'key': key})}"
        shown[queue_name]["top"].append(
            {"key": key, "ready": ready, "handed_out": handed_out, "url": link}
        )
    return shown


def _count(names: list[str]) -> list[tuple[str, str | None, int, int, int]]:
    """One statement: the live tasks of `names` grouped by (queue, key), ranked within each queue
    by tasks ready plus handed out, the first TOP_KEYS of each kept (rows read: the queues' ready
    and handed-out tasks, through the partial (queue, state) index; rows answered: bounded)."""
    total = F("ready") + F("handed_out")
    ranked = (
        Task.objects.filter(queue__in=names, state__in=COUNTED)
        .values("queue", "key")
        .annotate(
            ready=Count("pk", filter=Q(state=State.READY)),
            handed_out=Count("pk", filter=Q(state=State.HANDED_OUT)),
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("queue")],
                # Keys are never "": the tasks without one sort as that among equals.
                order_by=[total.desc(), F("handed_out").desc(), Coalesce("key", Value("")).asc()],
            ),
            keys=Window(Count("*"), partition_by=[F("queue")]),
        )
        .filter(rank__lte=TOP_KEYS)
        .order_by("queue", "rank")
        .values_list("queue", "key", "ready", "handed_out", "keys")
    )
    return list(ranked)
