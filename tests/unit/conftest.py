"""Unit-test fixtures of the worker runner: runners on the fake broker."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import factory
from tests.worker_fakes import FakeBroker
from workers import handlers
from workers.runner import Runner


@pytest.fixture
def make_runner(fake_broker: FakeBroker, log_file: Path) -> Iterator[Callable[..., Runner]]:
    """make_runner(**Runner kwargs) → a Runner on fake_broker writing to log_file, wait_ms 0 unless
    given; each is closed at teardown."""
    resolve = handlers.Dispatch(str(log_file))
    build = functools.partial(Runner, fake_broker)
    yield from factory(build, {"resolve": resolve, "wait_ms": 0}, Runner.close)
