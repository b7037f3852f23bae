"""Racing a state machine's requests, for the property tests: on PostgreSQL at once (threads on
connections of their own behind one barrier), on SQLite (one writer at a time) one after
another in an order Hypothesis draws."""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.db import connection
from hypothesis import strategies as st

from tests.concurrency.conftest import in_thread


def race(data: st.DataObject, actions: list[Callable[[], None]]) -> None:
    """Run the actions at once, or one after another in a drawn order; raise what any raised."""
    if connection.vendor != "postgresql":
        for i in data.draw(st.permutations(range(len(actions)))):
            actions[i]()
        return
    go = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def gated(action: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            go.wait(30)
            action()

        return run

    for thread in [in_thread(gated(action), errors) for action in actions]:
        thread.join(60)
    assert not errors, errors[0]
