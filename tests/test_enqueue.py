"""Job.objects.enqueue / aenqueue and the JobHandler shortcut: what one enqueue writes and returns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from awa_django.models import Job, JobState
from awa_django.registry import JobHandler, registry

COLUMNS = [f.attname for f in Job._meta.concrete_fields]


def handler(kind: str) -> JobHandler:
    found = registry.get(kind)
    assert isinstance(found, JobHandler), f"demo kind {kind!r} is not registered with @job"
    return found


@pytest.mark.django_db
def test_enqueue__returns_saved_job_with_defaults() -> None:
    job = Job.objects.enqueue("noop", {"user_id": 7})

    assert job.pk is not None
    assert job.kind == "noop"
    assert job.args == {"user_id": 7}
    assert job.state == JobState.AVAILABLE
    assert job.queue == "default"
    assert job.priority == 2
    assert job.max_attempts == 25
    assert job.attempt == 0
    assert job.run_at is not None
    assert job.run_at <= timezone.now()
    assert job.metadata == {}
    assert job.tags == []
    assert job.unique_key is None
    assert job._state.adding is False


@pytest.mark.django_db
def test_enqueue__returned_job_equals_the_stored_row() -> None:
    job = Job.objects.enqueue(
        "noop",
        {"a": [1, 2], "b": {"c": None}},
        queue="emails",
        priority=1,
        max_attempts=3,
        metadata={"trace": "t-1"},
        tags=["x", "y"],
        unique=True,
    )

    stored = Job.objects.get(pk=job.pk)
    assert {c: getattr(job, c) for c in COLUMNS} == {c: getattr(stored, c) for c in COLUMNS}


@pytest.mark.django_db
def test_enqueue__options_are_stored() -> None:
    run_at = timezone.now() - timedelta(minutes=5)

    job = Job.objects.enqueue(
        "noop", queue="reports", priority=4, max_attempts=1, run_at=run_at, metadata={"m": 1}, tags=["t"]
    )

    stored = Job.objects.get(pk=job.pk)
    assert (stored.queue, stored.priority, stored.max_attempts) == ("reports", 4, 1)
    assert stored.run_at == run_at
    assert stored.metadata == {"m": 1}
    assert stored.tags == ["t"]


@pytest.mark.django_db
def test_enqueue__args_none_is_an_empty_dict() -> None:
    job = Job.objects.enqueue("noop", None)

    assert Job.objects.get(pk=job.pk).args == {}


@pytest.mark.django_db
def test_enqueue__ids_increase() -> None:
    first = Job.objects.enqueue("noop")
    second = Job.objects.enqueue("noop")

    assert second.pk > first.pk


@pytest.mark.django_db
def test_enqueue__future_run_at_is_scheduled() -> None:
    run_at = timezone.now() + timedelta(hours=1)

    job = Job.objects.enqueue("noop", run_at=run_at)

    assert job.state == JobState.SCHEDULED
    stored = Job.objects.get(pk=job.pk)
    assert (stored.state, stored.run_at) == (JobState.SCHEDULED, run_at)


@pytest.mark.django_db
def test_enqueue__past_run_at_is_available() -> None:
    run_at = timezone.now() - timedelta(seconds=1)

    job = Job.objects.enqueue("noop", run_at=run_at)

    stored = Job.objects.get(pk=job.pk)
    assert (job.state, stored.state, stored.run_at) == (JobState.AVAILABLE, JobState.AVAILABLE, run_at)


@pytest.mark.django_db
def test_enqueue__no_run_at_is_available() -> None:
    job = Job.objects.enqueue("noop", run_at=None)

    assert Job.objects.get(pk=job.pk).state == JobState.AVAILABLE


@pytest_asyncio.fixture
async def close_async_connections() -> AsyncIterator[None]:
    """aenqueue runs in asgiref's sync thread, which opens its own connection: close it afterwards."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_aenqueue__inserts_and_returns_job(close_async_connections: None) -> None:
    job = await Job.objects.aenqueue("noop", {"n": 1}, queue="emails", priority=3)

    stored = await Job.objects.aget(pk=job.pk)
    assert (stored.kind, stored.args, stored.queue, stored.priority, stored.state) == (
        "noop",
        {"n": 1},
        "emails",
        3,
        JobState.AVAILABLE,
    )


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_aenqueue__future_run_at_is_scheduled(close_async_connections: None) -> None:
    job = await Job.objects.aenqueue("noop", run_at=timezone.now() + timedelta(days=1))

    assert job.state == JobState.SCHEDULED
    assert (await Job.objects.aget(pk=job.pk)).state == JobState.SCHEDULED


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_aenqueue_many__inserts_every_spec(close_async_connections: None) -> None:
    count = await Job.objects.aenqueue_many({"kind": "noop", "args": {"i": i}} for i in range(3))

    assert count == 3
    assert await Job.objects.filter(kind="noop").acount() == 3


@pytest.mark.django_db
def test_job_handler_enqueue__uses_the_handlers_kind_and_defaults() -> None:
    job = handler("fail").enqueue(message="boom")

    stored = Job.objects.get(pk=job.pk)
    assert (stored.kind, stored.args, stored.queue, stored.max_attempts, stored.priority) == (
        "fail",
        {"message": "boom"},
        "default",
        3,
        2,
    )


@pytest.mark.django_db
def test_job_handler_enqueue__options_override_the_handlers_defaults() -> None:
    job = handler("sleep").using(queue="slow", priority=4, max_attempts=7).enqueue(seconds=0.5)

    stored = Job.objects.get(pk=job.pk)
    assert (stored.kind, stored.args, stored.queue, stored.priority, stored.max_attempts) == (
        "sleep",
        {"seconds": 0.5},
        "slow",
        4,
        7,
    )


@pytest.mark.django_db
def test_job_handler_enqueue__future_run_at_is_scheduled() -> None:
    job = handler("noop").using(run_at=timezone.now() + timedelta(minutes=1)).enqueue()

    assert Job.objects.get(pk=job.pk).state == JobState.SCHEDULED


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_job_handler_aenqueue__inserts_job(close_async_connections: None) -> None:
    job = await handler("fail").aenqueue(message="later")

    stored = await Job.objects.aget(pk=job.pk)
    assert (stored.kind, stored.max_attempts) == ("fail", 3)


def test_demo_kinds__are_registered_by_autodiscovery() -> None:
    assert {"noop", "sleep", "fail"} <= {h.kind for h in registry}


@pytest.mark.django_db
def test_enqueue__prepared_on_the_server_unless_django_records_queries() -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    Job.objects.enqueue("noop")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("INSERT INTO awa_job" in text for text in prepared)

    # With queries recorded (DEBUG, assertNumQueries, debug toolbars) enqueue goes through Django's
    # cursor, so the recorder sees it.
    with CaptureQueriesContext(connection) as captured:
        job = Job.objects.enqueue("noop", {"seen": True})
    assert any("INSERT INTO awa_job" in query["sql"] for query in captured.captured_queries)
    assert Job.objects.get(pk=job.pk).args == {"seen": True}
