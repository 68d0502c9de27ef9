"""Per-kind execution rules on a real worker: ``@job(timeout=)`` against the queue's deadline
(async and sync handlers, and the row's ``deadline_at``), ``retry_on`` / ``discard_on`` with
subclasses, and a custom backoff in the retry's ``run_at``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from awa_django.models import Job
from awa_django.registry import job, registry
from awa_django.retry import Backoff
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker
from tests.worker.support import wait_for_row

QUEUE = "kind_rules"
KINDS = (
    "test_rules_short",
    "test_rules_short_sync",
    "test_rules_long",
    "test_rules_long_sync",
    "test_rules_held",
    "test_rules_raise",
)
# run_at - the error entry's at: the delay plus the moment the batched writer takes (see test_outcomes).
WRITE_SLACK = 1.0
release = threading.Event()


@pytest.fixture(autouse=True)
def kinds() -> Iterator[None]:
    release.clear()

    @job("test_rules_short", queue=QUEUE, max_attempts=1, timeout=0.2)
    async def short() -> None:
        await asyncio.sleep(60)  # its own work, far past the kind's timeout

    @job("test_rules_short_sync", queue=QUEUE, max_attempts=1, timeout=0.2)
    def short_sync() -> None:
        release.wait(30)  # its own work: returns once the test has seen the attempt end

    @job("test_rules_long", queue=QUEUE, max_attempts=1, timeout=30)
    async def long() -> None:
        await asyncio.sleep(0.5)  # its own work, longer than the queue's deadline

    @job("test_rules_long_sync", queue=QUEUE, max_attempts=1, timeout=30)
    def long_sync() -> None:
        time.sleep(0.5)

    @job("test_rules_held", queue=QUEUE, max_attempts=1, timeout=30)
    def held() -> None:
        release.wait(30)  # its own work: returns once the test has read its running row

    @job(
        "test_rules_raise",
        queue=QUEUE,
        max_attempts=5,
        retry_on=ConnectionError,
        discard_on=(ValueError,),
        backoff=Backoff("constant", base=600, jitter=0.5),
    )
    async def raise_(error: str) -> None:
        raise {"unicode": UnicodeError, "reset": ConnectionResetError, "key": KeyError}[error]("boom")

    try:
        yield
    finally:
        release.set()
        for kind in KINDS:
            registry.unregister(kind)


def deadline_set(job_id: int) -> timedelta:
    """The running attempt's deadline, as the claim wrote it: deadline_at - attempted_at."""
    running = wait_for_row(job_id, state="running")
    assert running.deadline_at is not None and running.attempted_at is not None
    return running.deadline_at - running.attempted_at


def gap(failed: Job) -> float:
    return (failed.run_at - datetime.fromisoformat(failed.errors[-1]["at"])).total_seconds()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["test_rules_short", "test_rules_short_sync"], ids=["async", "sync"])
def test_timeout__shorter_than_the_queues_deadline__ends_the_attempt_and_sets_deadline_at(kind: str) -> None:
    with running_worker(make_config({QUEUE: QueueConfig(QUEUE, deadline=30.0)})):
        enqueued = Job.objects.enqueue(kind)
        assert enqueued.timeout == timedelta(seconds=0.2)
        failed = wait_for_row(enqueued.pk, state="failed")
        release.set()

    # The executor's cut and the database-side rescue (deadline_at) race for a timeout this short;
    # either way the kind's 0.2 s decided, not the queue's 30 s.
    error = failed.errors[0]["error"]
    assert error.startswith(
        (
            "deadline exceeded: the handler ran longer than 0.2s",
            "deadline exceeded: the job ran past its kind's timeout",
        )
    ), error


@pytest.mark.django_db(transaction=True)
def test_timeout__the_claim_sets_deadline_at_from_the_kinds_timeout_not_the_queues() -> None:
    with running_worker(make_config({QUEUE: QueueConfig(QUEUE, deadline=0.1)})):
        # Running until the test has read the row: deadline_at is in the row only while the
        # attempt runs, and a handler that ran 0.5 s could end before a slow test thread looked.
        long_job = Job.objects.enqueue("test_rules_held")
        assert deadline_set(long_job.pk) == timedelta(seconds=30)
        release.set()
        wait_for_row(long_job.pk, state="completed")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["test_rules_long", "test_rules_long_sync"], ids=["async", "sync"])
def test_timeout__longer_than_the_queues_deadline__lets_the_handler_finish(kind: str) -> None:
    with running_worker(make_config({QUEUE: QueueConfig(QUEUE, deadline=0.1)})):
        enqueued = Job.objects.enqueue(kind)
        done = wait_for_row(enqueued.pk, state="completed")

    assert done.errors == [] and done.attempt == 1


@pytest.mark.django_db(transaction=True)
def test_rules__discard_on_subclass_fails_at_once_retry_on_subclass_retries_each_naming_its_rule() -> None:
    with running_worker(make_config([QUEUE])):
        discarded = Job.objects.enqueue("test_rules_raise", {"error": "unicode"})
        retried = Job.objects.enqueue("test_rules_raise", {"error": "reset"})
        default = Job.objects.enqueue("test_rules_raise", {"error": "key"})
        failed = wait_for_row(discarded.pk, state="failed")
        waiting = wait_for_row(retried.pk, state="retryable")
        by_default = wait_for_row(default.pk, state="retryable")

    assert failed.attempt == 1 and failed.errors[0]["rule"] == "discard_on ValueError"
    assert "UnicodeError: boom" in failed.errors[0]["error"]
    assert waiting.errors[0]["rule"] == "retry_on ConnectionError"
    assert "rule" not in by_default.errors[0]
    # the kind's curve: 600 s plus up to 50 % jitter, in the row's run_at
    for row in (waiting, by_default):
        assert 600.0 <= gap(row) <= 900.0 + WRITE_SLACK, gap(row)
