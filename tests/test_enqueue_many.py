"""Job.objects.enqueue_many: COPY in the caller's transaction, all or nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db import transaction
from django.utils import timezone

from awa_django import managers
from awa_django.exceptions import InvalidJobError
from awa_django.models import Job, JobState
from tests.conftest import count_jobs


class RollbackError(Exception):
    pass


def specs(n: int, **extra: Any) -> Iterator[dict[str, Any]]:
    return ({"kind": "noop", "args": {"i": i}, **extra} for i in range(n))


@pytest.mark.django_db
def test_enqueue_many__returns_count_and_writes_every_row() -> None:
    count = Job.objects.enqueue_many(list(specs(5)))

    assert count == 5
    assert sorted(Job.objects.values_list("args__i", flat=True)) == [0, 1, 2, 3, 4]
    assert set(Job.objects.values_list("state", "queue", "priority", "max_attempts", "attempt")) == {
        (JobState.AVAILABLE, "default", 2, 25, 0)
    }


@pytest.mark.django_db
def test_enqueue_many__accepts_a_generator() -> None:
    assert Job.objects.enqueue_many(specs(3)) == 3
    assert Job.objects.count() == 3


@pytest.mark.django_db
def test_enqueue_many__empty_input_writes_nothing() -> None:
    assert Job.objects.enqueue_many([]) == 0
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_enqueue_many__per_spec_options_are_honoured() -> None:
    later = timezone.now() + timedelta(hours=2)
    earlier = timezone.now() - timedelta(hours=2)

    Job.objects.enqueue_many(
        [
            {
                "kind": "a",
                "args": {"n": 1},
                "queue": "emails",
                "priority": 1,
                "max_attempts": 3,
                "metadata": {"m": "x"},
                "tags": ["t1", "t2"],
            },
            {"kind": "b", "queue": "reports", "priority": 4, "max_attempts": 1000, "run_at": later},
            {"kind": "c", "run_at": earlier},
            {"kind": "d", "run_at": None},
        ]
    )

    rows = {job.kind: job for job in Job.objects.all()}
    a, b, c, d = rows["a"], rows["b"], rows["c"], rows["d"]
    assert (a.args, a.queue, a.priority, a.max_attempts, a.metadata, a.tags, a.state) == (
        {"n": 1},
        "emails",
        1,
        3,
        {"m": "x"},
        ["t1", "t2"],
        JobState.AVAILABLE,
    )
    assert (b.queue, b.priority, b.max_attempts, b.state, b.run_at) == ("reports", 4, 1000, JobState.SCHEDULED, later)
    assert (c.state, c.run_at) == (JobState.AVAILABLE, earlier)
    assert d.state == JobState.AVAILABLE
    assert (d.args, d.metadata, d.tags, d.errors, d.unique_key, d.run_lease) == ({}, {}, [], [], None, 0)


@pytest.mark.django_db
def test_enqueue_many__rows_match_what_enqueue_would_write() -> None:
    single = Job.objects.enqueue("noop", {"x": 1}, queue="q", priority=3, tags=["t"], metadata={"k": 1})
    Job.objects.enqueue_many(
        [{"kind": "noop", "args": {"x": 1}, "queue": "q", "priority": 3, "tags": ["t"], "metadata": {"k": 1}}]
    )

    compared = [
        "kind",
        "queue",
        "args",
        "state",
        "priority",
        "attempt",
        "max_attempts",
        "errors",
        "metadata",
        "tags",
        "progress",
        "unique_key",
        "unique_states",
        "run_lease",
        "attempted_at",
        "finalized_at",
    ]
    bulk = Job.objects.exclude(pk=single.pk).values(*compared).get()
    assert Job.objects.filter(pk=single.pk).values(*compared).get() == bulk


def test_enqueue_many__ten_thousand_in_atomic_appear_only_at_commit(
    other_connection: psycopg.Connection[Any],
) -> None:
    with transaction.atomic():
        assert Job.objects.enqueue_many(specs(10_000)) == 10_000
        assert Job.objects.count() == 10_000
        assert count_jobs(other_connection) == 0

    assert count_jobs(other_connection) == 10_000
    assert count_jobs(other_connection, state="available") == 10_000


def test_enqueue_many__ten_thousand_rolled_back_leave_nothing(other_connection: psycopg.Connection[Any]) -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        Job.objects.enqueue_many(specs(10_000))
        assert count_jobs(other_connection) == 0
        raise RollbackError

    assert count_jobs(other_connection) == 0
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_enqueue_many__one_bad_spec_rejects_the_whole_call() -> None:
    bad = [*specs(10_000)]
    bad[7_345] = {"kind": "noop", "priority": 9}

    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue_many(bad)

    assert caught.value.index == 7_345
    assert str(caught.value).startswith("job spec #7345: priority=9: must be an integer from 1 to 4")
    assert Job.objects.count() == 0


def test_enqueue_many__spans_several_copy_batches_atomically(
    other_connection: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(managers, "COPY_BATCH_SIZE", 7)

    assert Job.objects.enqueue_many(specs(50)) == 50

    assert count_jobs(other_connection) == 50


def test_enqueue_many__outside_atomic_commits_on_its_own(other_connection: psycopg.Connection[Any]) -> None:
    Job.objects.enqueue_many(specs(3))

    assert count_jobs(other_connection) == 3


def test_enqueue_many__inside_atomic_joins_the_callers_transaction(
    other_connection: psycopg.Connection[Any],
) -> None:
    with pytest.raises(RollbackError), transaction.atomic():
        Job.objects.enqueue("noop")
        Job.objects.enqueue_many(specs(3))
        assert Job.objects.count() == 4
        raise RollbackError

    assert count_jobs(other_connection) == 0


_COMPARED = (
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "errors",
    "metadata",
    "tags",
    "progress",
    "result",
    "unique_key",
    "unique_states",
    "run_lease",
)


@pytest.mark.django_db
def test_enqueue_many__plain_specs_store_exactly_what_enqueue_stores() -> None:
    # Plain specs ({kind, args, queue, priority, max_attempts}) take enqueue_many's short path;
    # a row written that way must not differ from one enqueue writes.
    specs: list[dict[str, Any]] = [
        {"kind": "noop", "args": {"a": [1, "x\\ty", None]}, "queue": "q\\1", "priority": 4, "max_attempts": 3},
        {"kind": "noop", "args": {}},
        {"kind": "noop"},
    ]
    Job.objects.enqueue_many(specs)
    bulk = list(Job.objects.order_by("id"))
    single = [Job.objects.enqueue(**spec) for spec in specs]

    for written, reference in zip(bulk, single, strict=True):
        assert {f: getattr(written, f) for f in _COMPARED} == {f: getattr(reference, f) for f in _COMPARED}
        assert abs((written.run_at - written.created_at).total_seconds()) < 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ({"kind": ["noop"]}, "kind"),
        ({"kind": "noop", "queue": ""}, "queue"),
        ({"kind": "noop", "priority": 0}, "priority"),
        ({"kind": "noop", "priority": True}, "priority"),
        ({"kind": "noop", "max_attempts": 1001}, "max_attempts"),
        ({"kind": "noop", "args": {"s": {1, 2}}}, "args"),
        ({"kind": "noop", "args": {1: "int key"}}, "args"),
    ],
)
def test_enqueue_many__plain_spec_errors_name_the_index_and_write_nothing(bad: dict[str, Any], field: str) -> None:
    specs: list[dict[str, Any]] = [{"kind": "noop", "args": {"i": i}} for i in range(5)]
    specs.insert(3, bad)

    with pytest.raises(InvalidJobError) as caught:
        Job.objects.enqueue_many(specs)

    assert caught.value.index == 3 and caught.value.field == field
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("spec_extra", [{}, {"queue": "elsewhere"}, {"priority": 1}, {"tags": ["t"]}])
def test_enqueue_many__stores_the_kinds_timeout_on_every_row_whichever_path_the_spec_takes(
    spec_extra: dict[str, object],
) -> None:
    """A plain spec takes the shared-line path, one with tags the full one: both keep the kind's
    ``@job(timeout=)``, and a kind without one stays NULL, in one call."""
    from datetime import timedelta

    from awa_django.registry import job, registry

    @job("test_bulk_timeout", timeout=7)
    def timed() -> None: ...

    @job("test_bulk_untimed")
    def untimed() -> None: ...

    try:
        specs = [{"kind": "test_bulk_timeout", **spec_extra}, {"kind": "test_bulk_untimed", **spec_extra}] * 3
        assert Job.objects.enqueue_many(specs) == 6
        timeouts = {(j.kind, j.timeout) for j in Job.objects.all()}
        assert timeouts == {("test_bulk_timeout", timedelta(seconds=7)), ("test_bulk_untimed", None)}
    finally:
        registry.unregister("test_bulk_timeout")
        registry.unregister("test_bulk_untimed")
