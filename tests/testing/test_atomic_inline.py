"""Atomic handlers in-process: ``run_jobs()`` and immediate mode give the worker's all-or-nothing.

The handler's writes and its completion are one savepoint of the caller's transaction under
``run_jobs()`` in a test, one transaction of their own in immediate mode after the enqueue's commit:
a handler that raises leaves no write, no enqueued job, and its retry written on its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import transaction

from awa_django.context import ATOMIC_ENTRY_KEY
from awa_django.models import Job
from awa_django.registry import JobHandler, registry
from awa_django.testing import run_jobs
from awa_django.worker import JobContext
from testproject.demo.models import Execution
from tests.testing import jobs

FOLLOW_UP = jobs.add.kind  # testing.add, registered by tests.testing.jobs

KIND = "testing.atomic_charge"


def charge(context: JobContext, fail: bool = False) -> str:
    Execution.objects.create(job_id=context.job_id, attempt=context.attempt, run_lease=context.run_lease, pid=0)
    Job.objects.enqueue(FOLLOW_UP, {"a": 1, "b": 2})
    if fail:
        raise ValueError("declined")
    return "charged"


@pytest.fixture
def atomic_kind() -> Iterator[str]:
    registry.register(JobHandler(KIND, charge, takes_context=True, atomic=True, max_attempts=2))
    try:
        yield KIND
    finally:
        registry.unregister(KIND)


@pytest.mark.django_db
def test_run_jobs__atomic_completed__writes_and_completion_together(atomic_kind: str) -> None:
    job = Job.objects.enqueue(atomic_kind)
    report = run_jobs(kind=atomic_kind)
    assert [run.state for run in report.runs] == ["completed"]
    job.refresh_from_db()
    assert (job.state, job.result) == ("completed", "charged")
    assert list(Execution.objects.values_list("job_id", "run_lease")) == [(job.id, job.run_lease)]
    assert Job.objects.filter(kind=FOLLOW_UP).count() == 1


@pytest.mark.django_db
def test_run_jobs__atomic_raised__nothing_of_the_attempt_stays(atomic_kind: str) -> None:
    job = Job.objects.enqueue(atomic_kind, {"fail": True})
    report = run_jobs(kind=atomic_kind, raise_on_failure=False)
    assert [run.state for run in report.runs] == ["retryable"]
    job.refresh_from_db()
    assert job.state == "retryable"
    assert job.errors[0][ATOMIC_ENTRY_KEY] is True
    # The savepoint rolled back: no Execution row, no enqueued job; the retry was written after it.
    assert not Execution.objects.exists()
    assert not Job.objects.filter(kind=FOLLOW_UP).exists()


@pytest.mark.django_db(transaction=True)
def test_immediate__atomic__after_commit_all_or_nothing(atomic_kind: str, settings: object) -> None:
    settings.AWA = {"EXECUTION": "immediate"}  # type: ignore[attr-defined]
    with transaction.atomic():
        ok = Job.objects.enqueue(atomic_kind)
        failing = Job.objects.enqueue(atomic_kind, {"fail": True})
        assert not Execution.objects.exists()  # nothing runs before the commit
    ok.refresh_from_db()
    failing.refresh_from_db()
    assert ok.state == "completed"
    assert failing.state == "retryable"
    assert failing.errors[0][ATOMIC_ENTRY_KEY] is True
    assert list(Execution.objects.values_list("job_id", flat=True)) == [ok.id]
    # The completed attempt's follow-up ran too (immediate mode drains it); the failed one's never existed.
    assert list(Job.objects.filter(kind=FOLLOW_UP).values_list("state", flat=True)) == ["completed"]
