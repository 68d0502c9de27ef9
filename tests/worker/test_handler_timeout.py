"""A handler's own TimeoutError is its failure, not a deadline (issue 17).

Before, every TimeoutError out of a handler was reported as "deadline exceeded: the handler ran
longer than None s", also on a queue without a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import QueueConfig
from awa_django.worker.election import LEADER_LOCK
from tests.conftest import connect_outside_django
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import row

QUEUE = "timeouts"


async def async_times_out() -> None:
    raise TimeoutError("upstream API did not answer")


def sync_times_out() -> None:
    raise TimeoutError("upstream API did not answer")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("deadline", [None, 30.0], ids=["no-deadline", "deadline-30s"])
@pytest.mark.parametrize("func", [async_times_out, sync_times_out], ids=["async", "sync"])
def test_handler_raising_timeout_error__recorded_as_its_own_error(func: Any, deadline: float | None) -> None:
    registry = Registry()
    registry.register(JobHandler("times_out", func, queue=QUEUE, max_attempts=1))
    config = make_config({QUEUE: QueueConfig(QUEUE, deadline=deadline)})
    with running_worker(config, registry):
        job = Job.objects.enqueue("times_out", queue=QUEUE, max_attempts=1)
        failed = wait_until(lambda: (r := row(job.pk)).state == "failed" and r, what="the job failed")

    error = failed.errors[0]["error"]
    assert "TimeoutError: upstream API did not answer" in error, error
    assert "deadline" not in error


@pytest.fixture
def leadership_held_elsewhere(transactional_db: None) -> Iterator[None]:
    """Another session holds the maintenance leader's lock, so the worker under test never leads.

    A running row past its deadline_at is failed by two paths: the worker's own timer (this file's
    subject: "the handler ran longer than 0.2s") and the leader's rescue ("the job ran past its
    queue's deadline"). Both are right; under load either can come first. Without the leadership
    the rescue cannot run, and the worker's own path is the one observed, however slow the machine.
    """
    conn = connect_outside_django()
    try:
        wait_until(
            lambda: conn.execute("SELECT pg_try_advisory_lock(%s, %s)", LEADER_LOCK).fetchone() == (True,),
            what="the maintenance leader lock (a previous test's worker still holds it)",
        )
        yield
    finally:
        conn.close()  # the session's end releases the lock


def test_async_handler_past_its_deadline__still_reported_as_deadline_exceeded(leadership_held_elsewhere: None) -> None:
    import asyncio

    async def slow() -> None:
        await asyncio.sleep(60)  # the handler's own work, far past the queue's deadline

    registry = Registry()
    registry.register(JobHandler("slow", slow, queue=QUEUE, max_attempts=1))
    config = make_config({QUEUE: QueueConfig(QUEUE, deadline=0.2)})
    with running_worker(config, registry) as worker:
        job = Job.objects.enqueue("slow", queue=QUEUE, max_attempts=1)
        failed = wait_until(lambda: (r := row(job.pk)).state == "failed" and r, what="the job failed")
        assert not worker.is_leader  # so no rescue could have written this

    assert failed.errors[0]["error"] == "deadline exceeded: the handler ran longer than 0.2s"
