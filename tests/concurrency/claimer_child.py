"""A claimer process for the limit tests: `python -m tests.concurrency.claimer_child QUEUE SECONDS
MODE OUT` claims from QUEUE (DATABASE_URL) until SECONDS pass, and writes what it got to OUT.

MODE hold: keep every task claimed (never ack); churn: ack each batch at once; rate: claim one
at a time and ack it, noting the wall-clock time each claim came back.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(queue_name: str, seconds: float, mode: str, out: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueproject.settings")
    import django

    django.setup()
    from broker import queue

    got: list[tuple[float, int]] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = queue.claim([queue_name], 60_000, limit=1 if mode == "rate" else 3)
        at = time.time()
        got += [(at, d.task.pk) for d in batch]
        if batch and mode != "hold":
            queue.ack_many([(d.task.pk, d.lease_id, None) for d in batch])
        if not batch:
            time.sleep(0.001)
    with open(out, "w") as f:
        json.dump(got, f)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4])
