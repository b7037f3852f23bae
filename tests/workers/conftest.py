"""Fixtures of the worker tests; the fakes themselves live in worker_fakes.py."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.workers.worker_fakes import FakeBroker, FakeServer, serve, start_server
from workers.client import BrokerClient


@pytest.fixture
def fake_broker() -> FakeBroker:
    """A fresh in-memory broker."""
    return FakeBroker()


@pytest.fixture
def http_broker() -> Iterator[FakeServer]:
    """A running fake HTTP broker."""
    server, fake = start_server()
    thread = serve(server)
    yield fake
    fake.release.set()
    server.shutdown()
    thread.join()
    server.server_close()


@pytest.fixture
def make_client() -> Iterator[Callable[..., BrokerClient]]:
    """Build BrokerClients with fast backoff; all are closed at teardown."""
    made: list[BrokerClient] = []

    def make(url: str, **kwargs: Any) -> BrokerClient:
        kwargs.setdefault("backoff_base_s", 0.01)
        kwargs.setdefault("backoff_cap_s", 0.05)
        kwargs.setdefault("give_up_s", 2.0)
        client = BrokerClient(url, **kwargs)
        made.append(client)
        return client

    yield make
    for client in made:
        client.cancel_claims()
        client.close()


@pytest.fixture
def workers_logger() -> Iterator[logging.Logger]:
    """The "workers" logger, with its level and handlers restored after the test."""
    logger = logging.getLogger("workers")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers
