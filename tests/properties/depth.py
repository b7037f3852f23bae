"""How many random runs a state-machine test makes: each test runs at two depths, a sample in
`make test` and the whole count, marked slow, in `make test-slow` (.ci/run runs both). The three
machines drive the real state machine through the database step by step, and their whole counts
were a tenth of `make test`'s CPU."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

DEPTHS = [
    pytest.param(False, id="sample"),
    pytest.param(True, id="thorough", marks=pytest.mark.slow),
]


def machine_settings(thorough: bool, examples: int) -> settings:
    """`examples` runs of up to 40 steps when thorough, a third of the runs otherwise."""
    return settings(
        max_examples=examples if thorough else max(10, examples // 3),
        stateful_step_count=40,
        deadline=None,
        database=None,  # no .hypothesis/ folder in the repo
        suppress_health_check=[HealthCheck.too_slow],
    )
