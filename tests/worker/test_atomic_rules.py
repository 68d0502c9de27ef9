"""Atomic handlers that break a rule of transactions get an outcome and an error that say which.

Each attempt runs as the worker runs it (``inline.attempt``: claimed, then the worker's Executor
in this thread, its outcome written as the worker writes it), outside any test transaction where
the rule is about the handler's own COMMIT (``transaction=True``), inside one where it is about
``run_jobs()`` in a test. What is asserted is read back from the database: the job's row and what
the handler wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import IntegrityError, connection, transaction

from awa_django.context import JobContext
from awa_django.handlers import RegistryError
from awa_django.inline import JobRun
from awa_django.inline.attempt import claim, run_claimed
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry, registry
from awa_django.testing import run_jobs
from testproject.demo.models import Execution

QUEUE = "atomic_rules"
KIND = "atomic_rules.handler"


def write(context: JobContext) -> None:
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0)


def attempt(handler: Callable[[JobContext], Any]) -> tuple[JobRun, Job]:
    """One attempt of a new atomic job whose handler is ``handler``: its run and its row after it."""
    handlers = Registry()
    handlers.register(JobHandler(KIND, handler, queue=QUEUE, takes_context=True, atomic=True, max_attempts=3))
    job = Job.objects.enqueue(KIND, queue=QUEUE)
    [claimed] = claim("default", now=job.run_at, limit=1, ids=[job.id])
    run = run_claimed("default", claimed, handlers)
    return run, Job.objects.get(pk=job.id)


def assert_clean_connection() -> None:
    """The thread's connection is as an attempt found it: autocommit, no block, nothing pending."""
    assert connection.get_autocommit()
    assert not connection.in_atomic_block
    assert not connection.needs_rollback
    assert connection.run_on_commit == []


@pytest.mark.django_db(transaction=True)
def test_caught_integrity_error__retried_with_the_rule_named() -> None:
    def handler(context: JobContext) -> None:
        write(context)
        try:
            Execution.objects.create(job_id=None, attempt=1, run_lease=1, pid=0)  # type: ignore[misc]  # NOT NULL: refused
        except IntegrityError:
            pass  # caught without an inner atomic(): the transaction cannot commit

    run, row = attempt(handler)
    assert row.state == "retryable"
    assert run.error is not None
    assert "RolledBackError" in run.error["exception"]
    assert "inner transaction.atomic()" in run.error["error"]
    assert KIND in run.error["error"]
    assert not Execution.objects.filter(job_id=row.id).exists()
    assert_clean_connection()


@pytest.mark.django_db(transaction=True)
def test_caught_error_in_an_inner_atomic__completes_with_the_writes() -> None:
    def handler(context: JobContext) -> None:
        write(context)
        try:
            with transaction.atomic():
                Execution.objects.create(job_id=None, attempt=1, run_lease=1, pid=0)  # type: ignore[misc]
        except IntegrityError:
            pass  # the inner block rolled back alone, as the docs say to write it

    _, row = attempt(handler)
    assert row.state == "completed"
    assert Execution.objects.filter(job_id=row.id).count() == 1


@pytest.mark.django_db(transaction=True)
def test_raw_cursor_error_swallowed__retried_with_the_rule_named() -> None:
    def handler(context: JobContext) -> None:
        write(context)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
        except Exception:  # what the rule is about: an error swallowed
            pass

    run, row = attempt(handler)
    assert row.state == "retryable"
    assert run.error is not None
    assert "inner transaction.atomic()" in run.error["error"]
    assert not Execution.objects.filter(job_id=row.id).exists()
    assert_clean_connection()


@pytest.mark.django_db(transaction=True)
def test_connection_closed_in_the_handler__retried_with_the_cause_named() -> None:
    def handler(context: JobContext) -> None:
        write(context)
        connection.close()

    run, row = attempt(handler)
    assert row.state == "retryable"
    assert run.error is not None
    assert "closed its database connection" in run.error["error"]
    assert not Execution.objects.filter(job_id=row.id).exists()
    assert_clean_connection()


@pytest.mark.django_db(transaction=True)
def test_durable_block_inside__fails_at_once_naming_both_ways_out() -> None:
    def handler(context: JobContext) -> None:
        write(context)
        with transaction.atomic(durable=True):
            pass

    run, row = attempt(handler)
    assert (row.state, row.attempt) == ("failed", 1)  # not retried: every attempt would fail the same way
    assert run.error is not None
    message = run.error["error"]
    assert KIND in message and "durable=True" in message and "atomic=True" in message
    assert not Execution.objects.filter(job_id=row.id).exists()


@pytest.mark.django_db(transaction=True)
def test_callback_that_raises__the_later_ones_still_run(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    def fail() -> None:
        ran.append("failed")
        raise RuntimeError("mailer down")

    def handler(context: JobContext) -> None:
        write(context)
        transaction.on_commit(fail)
        transaction.on_commit(lambda: ran.append("after"))

    _, row = attempt(handler)
    assert row.state == "completed"
    assert ran == ["failed", "after"]
    assert Execution.objects.filter(job_id=row.id).count() == 1
    assert any("mailer down" in (record.exc_text or "") for record in caplog.records)
    assert_clean_connection()


@pytest.fixture
def deferred_table() -> Iterator[None]:
    with connection.cursor() as cursor:  # inside the test's transaction: gone with its rollback
        cursor.execute(
            "CREATE TABLE atomic_rules_parent (id int PRIMARY KEY);"
            "CREATE TABLE atomic_rules_child (parent_id int REFERENCES atomic_rules_parent (id) "
            "DEFERRABLE INITIALLY DEFERRED)"
        )
    yield


def insert_orphan() -> None:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO atomic_rules_child (parent_id) VALUES (999)")  # no such parent


@pytest.mark.django_db
def test_run_jobs__deferred_constraint_broken__retried_as_in_a_worker(deferred_table: None) -> None:
    """A worker's COMMIT would refuse the orphan (Django's foreign keys are deferred); under
    run_jobs() the test's transaction commits nothing, so the check runs before the completion."""
    registry.register(JobHandler(KIND, insert_orphan, queue=QUEUE, atomic=True, max_attempts=3))
    try:
        job = Job.objects.enqueue(KIND, queue=QUEUE)
        report = run_jobs(kind=KIND, raise_on_failure=False)
    finally:
        registry.unregister(KIND)
    assert [run.state for run in report.runs] == ["retryable"]
    job.refresh_from_db()
    assert job.state == "retryable"
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM atomic_rules_child")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db
def test_run_jobs__only_the_handlers_callbacks_join_the_callers_transaction(
    django_capture_on_commit_callbacks: Any,
) -> None:
    def handler() -> None:
        transaction.on_commit(lambda: None)

    registry.register(JobHandler(KIND, handler, queue=QUEUE, atomic=True))
    try:
        Job.objects.enqueue(KIND, queue=QUEUE)
        with django_capture_on_commit_callbacks() as callbacks:
            run_jobs(kind=KIND)
    finally:
        registry.unregister(KIND)
    assert len(callbacks) == 1


def plain() -> int:
    return 1


def test_sync_to_async_handler__is_async__refused_as_atomic() -> None:
    """asgiref marks the callables it makes as coroutine functions; Python 3.11's inspect does not
    see the mark, and such a handler would have been called without being awaited."""
    assert JobHandler("atomic_rules.s2a", sync_to_async(plain)).is_async
    with pytest.raises(RegistryError, match=r"atomic_rules\.s2a"):
        JobHandler("atomic_rules.s2a", sync_to_async(plain), atomic=True)
