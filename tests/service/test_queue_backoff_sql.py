"""The retry backoff PostgreSQL computes in a nack statement is states.backoff_ms, draw for draw."""

from __future__ import annotations

import pytest
from django.db import connection

from broker.queue import sql
from broker.states import backoff_ms

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


class Pinned:
    def __init__(self, jitter: float) -> None:
        self.jitter = jitter

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.jitter


@pytest.mark.parametrize("base_ms, cap_ms", [(1000, 30_000), (250, 1_000_000), (7, 13)])
def test_backoff_sql__every_attempt_and_jitter__equals_backoff_ms(
    base_ms: int, cap_ms: int
) -> None:
    cases = [(a, j) for a in (1, 2, 3, 5, 10, 40, 62, 63, 100) for j in (0.0, 0.25, 0.5, 0.999999)]
    # The expression is ours; the values go as parameters.
    query = f"SELECT {sql.backoff('a', 'j')} FROM (SELECT %(a)s::int AS a, %(j)s::float8 AS j) x"  # noqa: S608
    with connection.cursor() as cursor:
        for attempts, jitter in cases:
            cursor.execute(
                query,
                {"a": attempts, "j": jitter, "retry_base_ms": base_ms, "retry_max_ms": cap_ms},
            )
            (got,) = cursor.fetchone()
            assert int(got) == backoff_ms(attempts, base_ms, cap_ms, Pinned(jitter)), (
                attempts,
                jitter,
            )
