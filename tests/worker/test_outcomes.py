"""How an attempt ends decides the job's next state: retry with backoff, exhaustion, terminal
errors, snooze, retry-after, cancel, an unknown kind, args that do not fit the handler.

Each test runs a real in-process worker with a test-local registry. Where a backoff would make
the test sit and wait, the test checks the row's run_at and then moves it to now.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from awa_django.exceptions import Cancel, RetryAfter, Snooze, TerminalError
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext, Worker
from tests.harness import make_config, running_worker
from tests.worker.support import bring_forward, wait_for_row

QUEUE = "outcomes"
# The retryable write happens a moment after the error entry's timestamp (the batched writer):
# run_at - at = the backoff plus that moment. Generous, yet below the next power of two.
WRITE_SLACK = 1.0


class FlakyError(RuntimeError):
    pass


def _registry(calls: Counter[int]) -> Registry:
    async def flaky(context: JobContext) -> None:
        calls[context.job_id] += 1
        if context.attempt < 3:
            raise FlakyError(f"flaky failure on attempt {context.attempt}")

    async def always_fail(context: JobContext) -> None:
        calls[context.job_id] += 1
        raise ValueError("boom")

    async def terminal(context: JobContext) -> None:
        calls[context.job_id] += 1
        raise TerminalError("the input can never work")

    async def snooze_once(context: JobContext) -> None:
        calls[context.job_id] += 1
        if calls[context.job_id] == 1:
            raise Snooze(3600)

    async def retry_after_once(context: JobContext) -> None:
        calls[context.job_id] += 1
        if calls[context.job_id] == 1:
            raise RetryAfter(120, "rate limited upstream")

    async def cancel(context: JobContext) -> None:
        calls[context.job_id] += 1
        raise Cancel("customer deleted their account")

    async def typed(user_id: int) -> None:
        calls[-1] += 1  # never reached with args that do not fit

    registry = Registry()
    for kind, func in [
        ("flaky", flaky),
        ("always_fail", always_fail),
        ("terminal", terminal),
        ("snooze_once", snooze_once),
        ("retry_after_once", retry_after_once),
        ("cancel", cancel),
    ]:
        registry.register(JobHandler(kind, func, queue=QUEUE, takes_context=True))
    registry.register(JobHandler("typed", typed, queue=QUEUE))
    return registry


@pytest.fixture
def calls() -> Counter[int]:
    return Counter()


@pytest.fixture
def worker(transactional_db: None, calls: Counter[int]) -> Iterator[Worker]:
    with running_worker(make_config([QUEUE]), registry=_registry(calls)) as running:
        yield running


def _backoff_gap(job: Job) -> float:
    """Seconds from the last error to the run_at the retry was given."""
    return (job.run_at - datetime.fromisoformat(job.errors[-1]["at"])).total_seconds()


def _assert_error_entry(entry: dict[str, Any], attempt: int, text: str, exception: str) -> None:
    assert set(entry) >= {"error", "traceback", "attempt", "at"}, entry
    assert entry["attempt"] == attempt
    assert text in entry["error"]
    assert exception in entry["traceback"]
    datetime.fromisoformat(entry["at"])


@pytest.mark.django_db(transaction=True)
def test_outcome__fails_twice_then_succeeds__completed_on_attempt_3_after_backoffs(
    worker: Worker, calls: Counter[int]
) -> None:
    job = Job.objects.enqueue("flaky", queue=QUEUE, max_attempts=5)

    first = wait_for_row(job.pk, state="retryable", attempt=1)
    assert len(first.errors) == 1
    assert 2.0 <= _backoff_gap(first) <= 2.0 * 1.25 + WRITE_SLACK  # 2^1 s plus up to 25 % jitter
    bring_forward(job.pk)

    second = wait_for_row(job.pk, state="retryable", attempt=2)
    assert len(second.errors) == 2
    assert 4.0 <= _backoff_gap(second) <= 4.0 * 1.25 + WRITE_SLACK  # 2^2 s plus up to 25 % jitter
    bring_forward(job.pk)

    done = wait_for_row(job.pk, state="completed")
    assert done.attempt == 3
    assert done.finalized_at is not None
    assert [e["attempt"] for e in done.errors] == [1, 2]
    for attempt, entry in enumerate(done.errors, start=1):
        _assert_error_entry(entry, attempt, f"flaky failure on attempt {attempt}", "FlakyError")
    assert calls[job.pk] == 3


@pytest.mark.django_db(transaction=True)
def test_outcome__always_failing__exhausts_max_attempts_and_fails_with_full_history(
    worker: Worker, calls: Counter[int]
) -> None:
    job = Job.objects.enqueue("always_fail", queue=QUEUE, max_attempts=2)

    wait_for_row(job.pk, state="retryable", attempt=1)
    bring_forward(job.pk)
    failed = wait_for_row(job.pk, state="failed")

    assert failed.attempt == 2
    assert failed.finalized_at is not None
    assert [e["attempt"] for e in failed.errors] == [1, 2]
    for attempt, entry in enumerate(failed.errors, start=1):
        _assert_error_entry(entry, attempt, "ValueError: boom", "ValueError: boom")
    assert calls[job.pk] == 2


@pytest.mark.django_db(transaction=True)
def test_outcome__terminal_error__fails_at_once_on_attempt_1(worker: Worker, calls: Counter[int]) -> None:
    job = Job.objects.enqueue("terminal", queue=QUEUE, max_attempts=25)

    failed = wait_for_row(job.pk, state="failed")

    assert failed.attempt == 1
    assert failed.finalized_at is not None
    assert len(failed.errors) == 1
    _assert_error_entry(failed.errors[0], 1, "the input can never work", "TerminalError")
    assert calls[job.pk] == 1


@pytest.mark.django_db(transaction=True)
def test_outcome__snooze__scheduled_again_without_consuming_an_attempt(worker: Worker, calls: Counter[int]) -> None:
    job = Job.objects.enqueue("snooze_once", queue=QUEUE, max_attempts=1)

    snoozed = wait_for_row(job.pk, state="scheduled")
    assert snoozed.attempt == 0  # the attempt was given back
    assert snoozed.errors == []
    assert 3500 < (snoozed.run_at - snoozed.attempted_at).total_seconds() < 3700  # type: ignore[operator]
    bring_forward(job.pk)

    done = wait_for_row(job.pk, state="completed")
    assert done.attempt == 1  # with max_attempts=1, a consumed attempt would have left none
    assert done.errors == []
    assert calls[job.pk] == 2


@pytest.mark.django_db(transaction=True)
def test_outcome__retry_after__retryable_at_now_plus_delay_and_attempt_consumed(
    worker: Worker, calls: Counter[int]
) -> None:
    job = Job.objects.enqueue("retry_after_once", queue=QUEUE, max_attempts=5)

    waiting = wait_for_row(job.pk, state="retryable")
    assert waiting.attempt == 1
    assert 120.0 <= _backoff_gap(waiting) <= 120.0 + WRITE_SLACK
    assert len(waiting.errors) == 1
    _assert_error_entry(waiting.errors[0], 1, "rate limited upstream", "RetryAfter")
    bring_forward(job.pk)

    done = wait_for_row(job.pk, state="completed")
    assert done.attempt == 2
    assert calls[job.pk] == 2


@pytest.mark.django_db(transaction=True)
def test_outcome__cancel__ends_cancelled_with_the_reason(worker: Worker, calls: Counter[int]) -> None:
    job = Job.objects.enqueue("cancel", queue=QUEUE, max_attempts=5)

    cancelled = wait_for_row(job.pk, state="cancelled")

    assert cancelled.attempt == 1
    assert cancelled.finalized_at is not None
    assert len(cancelled.errors) == 1
    assert cancelled.errors[0]["attempt"] == 1
    assert "customer deleted their account" in cancelled.errors[0]["error"]
    assert calls[job.pk] == 1


@pytest.mark.django_db(transaction=True)
def test_outcome__unknown_kind__fails_at_once_naming_the_kind(worker: Worker) -> None:
    job = Job.objects.enqueue("no_such_kind", queue=QUEUE, max_attempts=25)

    failed = wait_for_row(job.pk, state="failed")

    assert failed.attempt == 1
    assert failed.finalized_at is not None
    assert len(failed.errors) == 1
    assert "'no_such_kind'" in failed.errors[0]["error"]
    assert failed.errors[0]["attempt"] == 1


@pytest.mark.django_db(transaction=True)
def test_outcome__args_not_matching_the_handler__fails_at_once_without_calling_it(
    worker: Worker, calls: Counter[int]
) -> None:
    job = Job.objects.enqueue("typed", {"user": 7}, queue=QUEUE, max_attempts=25)

    failed = wait_for_row(job.pk, state="failed")

    assert failed.attempt == 1
    assert failed.finalized_at is not None
    assert len(failed.errors) == 1
    assert "'user'" in failed.errors[0]["error"]
    assert "typed" in failed.errors[0]["error"]
    assert calls[-1] == 0
