"""Property-based fuzzing of the enqueue API.

Whatever a caller passes, ``enqueue`` and ``enqueue_many`` either store the job(s) or raise
InvalidJobError; never a driver error, a RecursionError, a partial write or an aborted
transaction. After every example a plain query on the same connection, inside the same atomic
block, still works, and the row count matches the successes. ``enqueue_many`` names the first
spec that ``enqueue`` alone would refuse.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from awa_django.exceptions import InvalidJobError, UniqueJobConflictError
from awa_django.managers import UniqueOptions
from awa_django.models import Job
from awa_django.validation import BRIEF_LENGTH, to_json


class StrSub(str):
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


class DictSub(dict):  # type: ignore[type-arg]
    pass


class TupleSub(tuple):  # type: ignore[type-arg]
    __slots__ = ()


class IntSub(int):
    def __str__(self) -> str:  # an int that prints itself oddly must still be stored as its value
        return "not a number"

    __format__ = None  # type: ignore[assignment]


POISON = ["\x00", "\ud800", "\udfff", "\udce9", "\\", "\t", "\n", "\r", '"', "é", "😀"]
text = st.one_of(
    st.text(st.one_of(st.characters(codec="utf-8"), st.sampled_from(POISON)), max_size=12),
    st.just("\\u0000 is not a NUL"),
)
any_text = st.one_of(text, text.map(StrSub))
names = st.one_of(st.sampled_from(["noop", "default", "q"]), any_text, st.just("x" * 256))
numbers = st.one_of(
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([2**63, 2**64, 10**400]),
    st.sampled_from([5000, 4400]).map(lambda digits: -(10**digits)),  # built late: hypothesis cannot repr it
    st.integers(-5, 5).map(IntSub),
)
odd = st.sampled_from([object(), {1, 2}, b"bytes", Decimal("1.5"), datetime(2030, 1, 1), 1j, range(3), Ellipsis])
leaves = st.one_of(st.none(), st.booleans(), numbers, any_text, odd)
keys = st.one_of(any_text, st.integers(-2, 2), st.none(), st.just((1, 2)))


def _nested(leaf: Any, depth: int) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


json_values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(ListSub),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(TupleSub),
        st.dictionaries(keys, children, max_size=4),
        st.dictionaries(keys, children, max_size=4).map(DictSub),
    ),
    max_leaves=16,
)
deep = st.builds(_nested, leaves, st.one_of(st.integers(90, 110), st.sampled_from([1_000, 10_000])))
objects = st.one_of(
    st.none(),
    st.dictionaries(keys, st.one_of(json_values, deep), max_size=4),
    st.dictionaries(text, json_values, max_size=3).map(DictSub),
    json_values,
)
small_ints = st.one_of(st.integers(-2, 1002), st.booleans(), st.none(), st.integers(1, 4).map(IntSub), odd)
datetimes = st.one_of(
    st.none(),
    st.datetimes(timezones=st.just(dt_timezone.utc)),
    st.datetimes(timezones=st.sampled_from([dt_timezone(timedelta(hours=14)), dt_timezone(timedelta(hours=-12))])),
    st.datetimes(),  # naive: refused with USE_TZ on
    st.just("2030-01-01"),
)
tags = st.one_of(
    st.none(),
    st.lists(any_text, max_size=4),
    st.lists(any_text, max_size=3).map(tuple),
    st.lists(any_text, max_size=3).map(ListSub),
    st.dictionaries(text, st.integers(), max_size=2),
    any_text,
    st.sets(st.sampled_from(["a", "b"])),
    st.lists(st.one_of(st.integers(), st.none()), min_size=1, max_size=2),
)
periods = st.one_of(
    st.none(),
    st.sampled_from([60, 3600.0, timedelta(hours=1), 10**400, 1e-320, 0.0005, float("nan"), float("inf"), -1, True]),
    st.floats(),
)
unique_dicts = st.fixed_dictionaries(
    {},
    optional={
        "by_args": st.one_of(st.booleans(), st.just("no")),
        "by_queue": st.booleans(),
        "by_period": periods,
        "states": st.one_of(
            st.just(["scheduled", "available", "running", "retryable", "completed"]),
            st.just(["available"]),
            st.just("available"),
            st.none(),
            st.lists(text, max_size=2),
        ),
        1: st.just(True),
        "by_arg": st.just(True),
    },
)
uniques = st.one_of(
    st.none(),
    st.booleans(),
    unique_dicts,
    st.builds(UniqueOptions, by_period=periods, states=st.sampled_from([(), ("available",), None, "available"])),
    st.just("yes"),
)
specs = st.fixed_dictionaries(
    {"kind": names},
    optional={
        "args": objects,
        "queue": names,
        "priority": small_ints,
        "max_attempts": small_ints,
        "run_at": datetimes,
        "metadata": objects,
        "tags": tags,
        "unique": uniques,
    },
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _numbers_exact(value: Any) -> Any:
    """JSON with every number as a Decimal: jsonb keeps numbers as numeric, so the float 1e16
    comes back as the int 10000000000000000; equal as numbers, not as Python values."""
    return json.loads(value if isinstance(value, str) else json.dumps(value), parse_float=Decimal, parse_int=Decimal)


def _stored_as(value: Any) -> Any:
    return _numbers_exact(to_json(value) if value is not None else "{}")


def _check_error(error: InvalidJobError) -> None:
    message = str(error)
    assert error.field in message
    assert len(message) < 4 * BRIEF_LENGTH + 600, f"the message copies too much of the value: {len(message)}"


def _enqueue_alone(spec: dict[str, Any]) -> bool:
    """Whether ``enqueue`` stores this spec (inside a savepoint that is rolled back)."""
    with transaction.atomic():
        try:
            Job.objects.enqueue(**spec)
        except InvalidJobError as error:
            _check_error(error)
            accepted = False
        else:
            accepted = True
        transaction.set_rollback(True)
    return accepted


@pytest.mark.django_db
@FUZZ
@given(spec=specs)
def test_enqueue__any_input_is_stored_or_refused_with_invalid_job_error(spec: dict[str, Any]) -> None:
    with transaction.atomic():
        try:
            job = Job.objects.enqueue(**spec)
        except InvalidJobError as error:
            _check_error(error)
            stored, outcome = 0, f"refused: {error.field}"
        else:
            stored, outcome = 1, "stored"
            row = Job.objects.get(pk=job.pk)  # a plain query: the transaction is usable
            assert _numbers_exact(row.args) == _stored_as(spec.get("args"))
            assert _numbers_exact(row.metadata) == _stored_as(spec.get("metadata"))
            assert row.kind == spec["kind"]
        assert Job.objects.count() == stored  # a plain query on the same connection, same block
        event(outcome)
        transaction.set_rollback(True)


@pytest.mark.django_db
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch=st.lists(st.one_of(specs, st.fixed_dictionaries({"kind": names, "args": objects})), min_size=1, max_size=4)
)
def test_enqueue_many__names_the_first_spec_enqueue_refuses_or_stores_all(batch: list[dict[str, Any]]) -> None:
    with transaction.atomic():
        accepted = [_enqueue_alone(spec) for spec in batch]
        try:
            count = Job.objects.enqueue_many(batch)
        except InvalidJobError as error:
            _check_error(error)
            assert error.index == accepted.index(False), f"{error} but enqueue alone accepts {accepted}"
            stored = 0
        except UniqueJobConflictError:
            assert all(accepted)  # two unique specs of this call collide: nothing of the call is kept
            stored = 0
        else:
            assert all(accepted), f"enqueue_many stored {batch} but enqueue alone refuses some: {accepted}"
            assert count == len(batch)
            stored = count
        assert Job.objects.count() == stored
        event(f"stored {stored} of {len(batch)}")
        transaction.set_rollback(True)
