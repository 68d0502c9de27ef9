"""AWA["EXECUTION"] = "immediate": each job runs in-process right after its enqueue commits, never
before and never after a rollback, with the worker's outcome rules written to the row."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import TestCase, override_settings
from django.utils import timezone

from awa_django import inline
from awa_django.models import Job
from testproject.demo.models import Execution
from tests.tasks import tasks
from tests.testing import jobs

IMMEDIATE = {"EXECUTION": "immediate"}


@pytest.fixture
def immediate(transactional_db, settings):
    settings.AWA = IMMEDIATE


def state(job: Job) -> tuple[str, int]:
    job.refresh_from_db()
    return job.state, job.attempt


def test_immediate__runs_after_commit_and_not_before(immediate):
    with transaction.atomic():
        job = Job.objects.enqueue("testing.touch")
        assert state(job) == ("available", 0)  # still inside the enqueuing transaction
        assert not Execution.objects.exists()
    assert state(job) == ("completed", 1)
    assert job.result == Execution.objects.get(job_id=job.pk).pk


def test_immediate__a_rolled_back_enqueue_runs_nothing(immediate):
    class AbortError(Exception):
        pass

    with pytest.raises(AbortError), transaction.atomic():
        Job.objects.enqueue("testing.touch")
        raise AbortError
    assert not Job.objects.exists()
    assert not Execution.objects.exists()


def test_immediate__a_rolled_back_savepoint_runs_nothing_of_it(immediate):
    with transaction.atomic():
        kept = Job.objects.enqueue("testing.touch")
        try:
            with transaction.atomic():
                Job.objects.enqueue("testing.touch")
                raise RuntimeError("roll back the savepoint")
        except RuntimeError:
            pass
    assert state(kept) == ("completed", 1)
    assert list(Execution.objects.values_list("job_id", flat=True)) == [kept.pk]


def test_immediate__outside_a_transaction_it_runs_at_once(immediate):
    job = jobs.add_async.enqueue(a=20, b=22)  # an async handler
    assert state(job) == ("completed", 1)
    assert job.result == 42


def test_immediate__aenqueue_runs_after_commit(immediate):
    job = async_to_sync(Job.objects.aenqueue)("testing.touch_async")
    assert state(job) == ("completed", 1)
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_immediate__enqueue_many_runs_every_job_of_the_call(immediate):
    before = Job.objects.enqueue("testing.add", {"a": 0, "b": 0}, run_at=timezone.now() + timedelta(hours=1))
    with transaction.atomic():
        assert Job.objects.enqueue_many([{"kind": "testing.touch"} for _ in range(3)]) == 3
        assert not Execution.objects.exists()
    assert Execution.objects.count() == 3
    assert set(Job.objects.exclude(pk=before.pk).values_list("state", "attempt")) == {("completed", 1)}
    assert state(before) == ("scheduled", 0)  # another call's job, and not due: left for a worker


def test_immediate__a_tasks_framework_task_runs(immediate):
    result = tasks.label.enqueue("hello")
    result.refresh()
    assert (str(result.status), result.return_value) == ("SUCCESSFUL", "hello")


def test_immediate__an_async_task_runs(immediate):
    result = tasks.add_async.enqueue(2, 3)
    result.refresh()
    assert (str(result.status), result.return_value) == ("SUCCESSFUL", 5)  # type: ignore[comparison-overlap]


def test_immediate__a_failure_is_written_and_left_for_a_worker(immediate, caplog):
    with caplog.at_level(logging.WARNING, logger="awa_django.inline"):
        job = jobs.boom.enqueue(message="smtp down")
    assert state(job) == ("retryable", 1)  # not retried here: no sleeping through the backoff
    assert job.errors[0]["error"] == "tests.testing.jobs.BoomError: smtp down"
    assert job.run_at > timezone.now()
    [record] = [r for r in caplog.records if r.name == "awa_django.inline"]
    assert f"job_id={job.pk} kind=testing.boom attempt=1 state=retryable" in record.getMessage()


def test_immediate__a_job_enqueuing_jobs_runs_them_after_itself(immediate):
    parent = Job.objects.enqueue("testing.parent", {"children": 3})
    assert state(parent) == ("completed", 1)
    assert parent.result is not None
    children = Job.objects.filter(pk__in=parent.result).order_by("pk")
    assert [(job.state, job.result) for job in children] == [("completed", 1), ("completed", 2), ("completed", 3)]
    # Not nested inside the parent: each child started after the parent had finished.
    assert all(job.attempted_at >= parent.finalized_at for job in children)  # type: ignore[operator]


def test_immediate__a_chain_without_end_stops_at_the_bound(immediate, monkeypatch, caplog):
    monkeypatch.setattr(inline, "MAX_IMMEDIATE_CHAIN", 4)
    with caplog.at_level(logging.WARNING, logger="awa_django.inline"):
        Job.objects.enqueue("testing.forever")
    assert Job.objects.filter(state="completed").count() == 4
    [left] = Job.objects.exclude(state="completed")
    assert (left.state, left.attempt) == ("available", 0)  # for a worker
    assert f"stopped after 4 jobs in one chain; left for a worker left=1 first_job_id={left.pk}" in caplog.text


def test_immediate__a_scheduled_job_waits_for_a_worker(immediate):
    job = Job.objects.enqueue("testing.touch", run_at=timezone.now() + timedelta(hours=1))
    assert state(job) == ("scheduled", 0)
    assert not Execution.objects.exists()


def test_worker_mode__commit_runs_nothing(transactional_db, settings):
    settings.AWA = {}
    job = Job.objects.enqueue("testing.touch")
    assert state(job) == ("available", 0)
    assert not Execution.objects.exists()


def test_bad_execution_value__enqueue_raises_naming_it(transactional_db, settings):
    settings.AWA = {"EXECUTION": "inline"}
    with pytest.raises(ImproperlyConfigured, match=r"AWA\['EXECUTION'\] is 'inline'; use 'worker' .* or 'immediate'"):
        Job.objects.enqueue("testing.touch")


def test_bad_execution_value__is_check_awa_E008(settings):
    settings.AWA = {"EXECUTION": "eager"}
    [error] = [message for message in run_checks() if message.id == "awa.E008"]
    assert error.msg == "AWA['EXECUTION'] is 'eager'; it must be one of 'worker', 'immediate'"
    assert "use 'worker'" in error.hint  # type: ignore[operator]
    settings.AWA = IMMEDIATE
    assert not [message for message in run_checks() if message.id == "awa.E008"]


@override_settings(AWA=IMMEDIATE)
class ImmediateInTestCase(TestCase):
    """In a TestCase nothing commits: the jobs run when the test runs the on-commit callbacks."""

    def test_runs_with_the_captured_on_commit_callbacks(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            job = Job.objects.enqueue("testing.touch")
            assert state(job) == ("available", 0)
        assert state(job) == ("completed", 1)
        assert Execution.objects.filter(job_id=job.pk).exists()

    def test_without_executing_them_nothing_runs(self) -> None:
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            job = Job.objects.enqueue("testing.touch")
        assert len(callbacks) == 1
        assert state(job) == ("available", 0)
