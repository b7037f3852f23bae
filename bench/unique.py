"""Cost of unique keys on a batch enqueue, in-process (the WSGI application called directly):
POST /jobs/batch of 1000 plain items beside 1000 items with a unique key each (all new), and
1000 whose keys are all held (each answered by its pending holder, which absorbs it).

    python bench/unique.py [--rounds N]

Creates and drops its own PostgreSQL database (BENCH_PG names the server), as inprocess.py.
Prints the median wall and CPU time of one batch call of each kind.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inprocess  # the sibling module, found through the path just added

ITEMS = 1000


def main() -> None:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 15
    with psycopg.connect(f"{inprocess.PG}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {inprocess.DB}")
    try:
        call = inprocess._setup()
        run(call, rounds)
    finally:
        from django.db import connections

        from broker.wakeup import hub

        hub.stop()
        connections.close_all()
        with psycopg.connect(f"{inprocess.PG}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {inprocess.DB} WITH (FORCE)")


def run(call, rounds: int) -> None:  # type: ignore[no-untyped-def]
    def body(n: int, unique: bool, prefix: str) -> bytes:
        jobs: list[dict] = [{"payload": {"line": str(i)}} for i in range(n)]
        if unique:
            for i, item in enumerate(jobs):
                item["unique"] = {"key": f"{prefix}-{i}"}
        return json.dumps({"jobs": jobs}).encode()

    kinds = {
        "plain": lambda r: body(ITEMS, False, ""),
        "unique new": lambda r: body(ITEMS, True, f"new{r}"),
        "unique held": lambda r: body(ITEMS, True, "held"),
    }
    call("POST", "/jobs/batch", body=body(ITEMS, True, "held"))  # the holders of "held"
    for r in range(3):  # warm up
        for make in kinds.values():
            call("POST", "/jobs/batch", body=make(-1 - r))
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for r in range(rounds):
        for name, make in kinds.items():
            data = make(r)
            cpu, wall = time.process_time(), time.perf_counter()
            call("POST", "/jobs/batch", body=data)
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    plain = statistics.median(w for w, _ in times["plain"])
    for name, got in times.items():
        wall = statistics.median(w for w, _ in got)
        cpu = statistics.median(c for _, c in got)
        print(
            f"{name:12s} {1000 * wall:7.1f} ms wall {1000 * cpu:7.1f} ms CPU per batch of {ITEMS}"
            f"  ({wall / plain:.2f}x plain)",
            flush=True,
        )


if __name__ == "__main__":
    main()
