"""The enqueue fast path never accepts what the serializer refuses, nor reads it differently."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.exceptions import InvalidTaskError
from broker.validation import EnqueueSerializer, new_task, quick_new_task, task_from_attrs
from contract.errors import flatten

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
field_values = {
    "payload": json_values,
    "max_attempts": st.integers(-2, 102)
    | st.booleans()
    | st.text(max_size=3)
    | st.none()
    | st.floats(0, 5),
    "delay_ms": st.integers(-1, 7 * 24 * 3600 * 1000 + 1) | st.none() | st.text(max_size=3),
    "queue": st.text(max_size=70) | st.sampled_from(["default", "a.b-c_9", "x\n"]) | st.none(),
    "priority": st.sampled_from(["high", "normal", "low", "HIGH", "", 1]) | st.none(),
    "type": st.none() | st.sampled_from(["sleep_job", "nope"]),
    "idempotency_key": st.none() | st.text(max_size=260) | st.integers(),
    "max_attempt": st.integers(),
    "unique": st.none()
    | st.text(max_size=3)
    | st.fixed_dictionaries(
        {},
        optional={
            "key": st.text(max_size=260) | st.integers() | st.none(),
            "until": st.sampled_from(["finished", "started", "period", "never", ""]) | st.none(),
            "period_s": st.integers(-1, 604_801) | st.none() | st.floats(0, 5) | st.booleans(),
            "on_conflict": st.sampled_from(["skip", "replace", "merge"]) | st.none(),
            "debounce_ms": st.integers(-1, 7 * 86_400_000 + 1) | st.none() | st.text(max_size=2),
            "debounce_max_ms": st.integers(-1, 30 * 86_400_000 + 1) | st.none(),
            "kee": st.integers(),
        },
    ),
}
bodies = st.fixed_dictionaries({}, optional=field_values) | json_values


@settings(max_examples=400, deadline=None)
@given(bodies)
def test_quick_new_task__agrees_with_the_serializer(body) -> None:
    quick = quick_new_task(body)
    if quick is None:
        return  # the serializer decides: nothing to compare
    serializer = EnqueueSerializer(data=body)
    assert serializer.is_valid(), serializer.errors
    assert task_from_attrs(serializer.validated_data) == quick


@pytest.mark.django_db  # "nope" is looked up among the job types of your own
@settings(max_examples=300, deadline=None)
@given(bodies)
def test_new_task__takes_what_the_serializer_takes_refuses_what_it_refuses(body) -> None:
    serializer = EnqueueSerializer(data=body)
    try:
        task = new_task(body)
    except InvalidTaskError as exc:
        assert not serializer.is_valid()
        if isinstance(body, dict):
            assert exc.fields == flatten(serializer.errors)
    else:
        assert serializer.is_valid(), serializer.errors
        assert task == task_from_attrs(serializer.validated_data)


@pytest.mark.parametrize(
    "body",
    [
        {"payload": 1},
        {"payload": None, "max_attempts": 100, "delay_ms": 0, "queue": "q", "priority": "low"},
        {"payload": {"a": [1, "\u0000"]}, "idempotency_key": "k ", "type": None},
        {"payload": 1, "unique": {"key": "k"}},
        {
            "payload": 1,
            "unique": {
                "key": "k",
                "until": "period",
                "period_s": 60,
                "on_conflict": "replace",
                "debounce_ms": 0,
                "debounce_max_ms": 1,
            },
        },
    ],
)
def test_quick_new_task__plain_bodies__taken_fast(body) -> None:
    assert quick_new_task(body) is not None
