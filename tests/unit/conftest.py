"""Unit-test fixtures of the worker runner: runners on the fake broker."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker_fakes import FakeBroker
from workers import handlers
from workers.runner import Runner


@pytest.fixture
def make_runner(fake_broker: FakeBroker, log_file: Path) -> Iterator[Callable[..., Runner]]:
    """make_runner(**Runner kwargs) → a Runner on fake_broker writing to log_file, wait_ms 0 unless
    given; each is closed at teardown."""
    made: list[Runner] = []

    def make(**kwargs: Any) -> Runner:
        kwargs.setdefault("resolve", functools.partial(handlers.resolve, log_file=str(log_file)))
        kwargs.setdefault("wait_ms", 0)
        runner = Runner(fake_broker, **kwargs)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()
