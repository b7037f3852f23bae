"""The claim and ack statements of two checkouts, interleaved on one fresh PostgreSQL database:
database time per task, without HTTP or Python noise.

    python bench/compare_sql.py OTHER_CHECKOUT [--n 1500] [--rounds 6]

OTHER_CHECKOUT is a directory holding another version's broker/queue/sql.py (say, main's, from
`git archive main | tar -x -C /tmp/main`). Prints the median and fastest round of each.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
DB = f"bench_compare_sql_{os.getpid()}"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"sql_{abs(hash(path))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _round(conn: Any, sql: ModuleType, n: int) -> tuple[float, float]:
    """(claim ms, ack ms) per task over n claim-then-ack pairs."""
    claim_s = ack_s = 0.0
    for _ in range(n):
        now, lease, shard = datetime.now(UTC), uuid.uuid4().hex, random.randrange(16)
        params = {"queues": None, "queue": None, "limit": 1, "lease_id": lease,
                  "deadline": now + timedelta(seconds=30), "now": now, "worker": None,
                  "shard": shard}  # fmt: skip
        t0 = time.perf_counter()
        pk = conn.execute(sql.CLAIM_ANY, params).fetchall()[0][0]
        t1 = time.perf_counter()
        settle = {
            "acks": 1,
            "ack_ids": [pk],
            "ack_leases": [lease],
            "ack_bodies": [None],
            "nack_ids": [],
            "nack_leases": [],
            "nack_bodies": [],
            "nack_jitter": [],
            "now": now,
            "shard": shard,
            "retry_base_ms": 1000,
            "retry_max_ms": 30000,
        }
        conn.execute(sql.SETTLE, settle).fetchall()
        claim_s, ack_s = claim_s + t1 - t0, ack_s + time.perf_counter() - t1
    return claim_s / n * 1000, ack_s / n * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("other", type=Path)
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {DB}")
    try:
        os.environ.update(DATABASE_URL=f"{PG}/{DB}", DJANGO_SETTINGS_MODULE="queueproject.settings")
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        call_command("migrate", verbosity=0)
        connection.close()
        versions = {"this": _load(ROOT / "broker/queue/sql.py"),
                    "other": _load(args.other / "broker/queue/sql.py")}  # fmt: skip
        with psycopg.connect(f"{PG}/{DB}", autocommit=True, prepare_threshold=2) as conn:
            conn.execute(
                "INSERT INTO broker_task (state, queue, priority, payload, attempts, max_attempts,"
                " available_at, created_at, updated_at) SELECT 'ready', 'q' || (g %% 5), 1, '{}',"
                " 0, 3, now(), now(), now() FROM generate_series(1, %s) g",
                [args.n * args.rounds * 2 + 100],
            )
            conn.execute("ANALYZE")
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in versions}
            for i in range(args.rounds):
                order = list(versions) if i % 2 == 0 else list(versions)[::-1]
                for name in order:
                    results[name].append(_round(conn, versions[name], args.n))
        for name, rounds in results.items():
            claims, acks = sorted(r[0] for r in rounds), sorted(r[1] for r in rounds)
            print(f"{name:5s}  claim median {claims[len(claims) // 2]:.3f} ms, fastest "
                  f"{claims[0]:.3f} ms;  ack median {acks[len(acks) // 2]:.3f} ms, fastest "
                  f"{acks[0]:.3f} ms")  # fmt: skip
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


if __name__ == "__main__":
    main()
