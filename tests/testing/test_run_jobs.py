"""run_jobs: due jobs run through the real executor on the test's own connection (pytest-django,
in the test's transaction), with the worker's outcome rules written to the rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from awa_django import testing
from awa_django.models import Job, Queue
from awa_django.testing import JobsFailedError, RunawayJobsError, run_jobs
from testproject.demo.models import Execution
from tests.testing import jobs

pytestmark = pytest.mark.django_db

LATER = timedelta(days=2)  # past every backoff of the handlers here (attempts <= 5: at most 40 s)


def row(job: Job) -> Job:
    job.refresh_from_db()
    return job


def test_run_jobs__sync_and_async_handlers_complete_with_their_results(awa):
    sync_job = Job.objects.enqueue("testing.add", {"a": 2, "b": 3})
    async_job = jobs.add_async.enqueue(a=4, b=5)

    report = awa.run_jobs()

    assert [(run.job_id, run.state, run.result) for run in report] == [
        (sync_job.pk, "completed", 5),
        (async_job.pk, "completed", 9),
    ]
    for job, result in ((sync_job, 5), (async_job, 9)):
        job = row(job)
        assert (job.state, job.result, job.attempt) == ("completed", result, 1)
        assert job.finalized_at is not None


@pytest.mark.parametrize("kind", ["testing.touch", "testing.touch_async"])
def test_run_jobs__handlers_orm_writes_are_visible_in_the_test(kind):
    job = Job.objects.enqueue(kind)

    [run] = run_jobs()

    execution = Execution.objects.get(job_id=job.pk)
    assert run.result == execution.pk
    assert (execution.attempt, execution.run_lease) == (1, row(job).run_lease)


def test_run_jobs__nothing_due_runs_nothing():
    report = run_jobs()
    assert len(report) == 0
    assert str(report) == "no jobs ran"


def test_run_jobs__a_retry_is_reported_and_waits_for_its_backoff():
    job = Job.objects.enqueue("testing.flaky", {"fail_attempts": 1})

    report = run_jobs(raise_on_failure=False)

    [run] = report.retried
    assert (run.job_id, run.attempt, run.state) == (job.pk, 1, "retryable")
    assert run.error is not None and run.error["error"] == "ValueError: attempt 1 fails on purpose"
    job = row(job)
    assert (job.state, job.attempt, len(job.errors)) == ("retryable", 1, 1)
    assert "ValueError: attempt 1 fails on purpose" in job.errors[0]["traceback"]

    assert len(run_jobs()) == 0  # the backoff is not over by the run's cutoff

    [second] = run_jobs(now=timezone.now() + LATER)
    assert (second.attempt, second.state, second.result) == (2, "completed", "succeeded on attempt 2")
    assert row(job).state == "completed"


def test_run_jobs__later_now_runs_every_retry_until_attempts_are_exhausted():
    job = jobs.boom.enqueue(message="always")

    report = run_jobs(now=timezone.now() + LATER, raise_on_failure=False)

    assert [(run.attempt, run.state) for run in report] == [(1, "retryable"), (2, "failed")]
    assert report.failed == [report[1]]
    job = row(job)
    assert (job.state, job.attempt) == ("failed", 2)
    assert [entry["attempt"] for entry in job.errors] == [1, 2]


@pytest.mark.parametrize("kind", ["testing.boom", "testing.boom_async"])
def test_run_jobs__a_failure_raises_after_its_outcome_is_written(kind):
    job = Job.objects.enqueue(kind, {"message": "card declined"})
    other = Job.objects.enqueue("testing.add", {"a": 1, "b": 1})

    with pytest.raises(JobsFailedError) as raised:
        run_jobs()

    message = str(raised.value)
    assert f"job {job.pk} {kind!r}" in message
    assert "tests.testing.jobs.BoomError: card declined" in message
    assert "Traceback" in message and "raise_on_failure=False" in message
    assert [run.state for run in raised.value.report] == ["retryable", "completed"]
    assert row(job).state == "retryable"
    assert row(other).state == "completed"  # the run went on after the failure


@pytest.mark.parametrize(
    ("kind", "args", "state", "attempt", "error"),
    [
        ("testing.terminal", {}, "failed", 1, "awa_django.exceptions.TerminalError: card declined"),
        ("testing.cancel", {}, "cancelled", 1, "cancelled: no longer needed"),
        ("testing.snooze", {"seconds": 60}, "scheduled", 0, None),
        ("testing.retry_after", {"seconds": 60}, "retryable", 1, "awa_django.exceptions.RetryAfter: retry after 60"),
        ("testing.nobody_handles_this", {}, "failed", 1, "no handler registered for kind"),
    ],
)
def test_run_jobs__each_outcome_is_written_as_a_worker_writes_it(kind, args, state, attempt, error):
    job = Job.objects.enqueue(kind, args)

    [run] = run_jobs(raise_on_failure=False)

    job = row(job)
    assert (run.state, job.state, job.attempt) == (state, state, attempt)
    if error is None:
        assert job.errors == [] and run.error is None
    else:
        assert job.errors[-1]["error"].startswith(error)
        assert run.error == job.errors[-1]
    if state in ("scheduled", "retryable"):
        assert job.run_at > timezone.now() + timedelta(seconds=30)  # the delay, from the database clock


def test_run_jobs__cancel_and_snooze_do_not_count_as_failures():
    Job.objects.enqueue("testing.cancel")
    Job.objects.enqueue("testing.snooze", {"seconds": 60})

    report = run_jobs()  # raise_on_failure is on: nothing raised

    assert [run.state for run in report] == ["cancelled", "scheduled"]
    assert report.failures == []


def test_run_jobs__progress_is_stored_with_the_result():
    job = Job.objects.enqueue("testing.progress", {"steps": 3})
    run_jobs()
    job = row(job)
    assert (job.state, job.progress, job.result) == ("completed", {"step": 3}, {"steps": 3})


@pytest.mark.parametrize(
    ("kind", "child"), [("testing.parent", "testing.add"), ("testing.parent_async", "testing.add_async")]
)
def test_run_jobs__jobs_enqueued_by_jobs_run_too(kind, child):
    parent = Job.objects.enqueue(kind, {"children": 3})

    report = run_jobs()

    assert report.kinds == [kind, child, child, child]
    children = report[0].result
    assert [run.job_id for run in report[1:]] == children  # type: ignore[index, attr-defined]
    assert [run.result for run in report[1:]] == [1, 2, 3]  # type: ignore[index, attr-defined]
    assert row(parent).state == "completed"
    assert set(Job.objects.filter(pk__in=children).values_list("state", flat=True)) == {"completed"}


def test_run_jobs__a_chain_without_end_stops_at_the_bound(monkeypatch):
    monkeypatch.setattr(testing.runner, "MAX_RUNS", 5)
    Job.objects.enqueue("testing.forever")

    with pytest.raises(RunawayJobsError, match=r"ran 5 attempts and jobs are still due .*testing\.forever.*limit=N"):
        run_jobs()

    # The attempt claimed past the bound is handed back due, its attempt not counted, with a reason.
    [left] = Job.objects.exclude(state="completed")
    assert (left.state, left.attempt) == ("retryable", 0)
    assert "stopped after 5 attempts" in left.errors[-1]["error"]
    assert Job.objects.filter(state="completed").count() == 5


def test_run_jobs__limit_runs_at_most_that_many():
    first, second, third = (Job.objects.enqueue("testing.add", {"a": i, "b": 0}) for i in range(3))

    assert [run.job_id for run in run_jobs(limit=2)] == [first.pk, second.pk]
    assert row(third).state == "available"


def test_run_jobs__in_priority_order_then_enqueue_order():
    low = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, priority=4)
    high = Job.objects.enqueue("testing.add", {"a": 2, "b": 0}, priority=1)
    default = Job.objects.enqueue("testing.add", {"a": 3, "b": 0})
    assert [run.job_id for run in run_jobs()] == [high.pk, default.pk, low.pk]


def test_run_jobs__queue_and_kind_select_the_jobs():
    emails = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, queue="emails")
    other_kind = Job.objects.enqueue("testing.add_async", {"a": 1, "b": 0}, queue="emails")
    other_queue = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, queue="reports")

    assert [run.job_id for run in run_jobs(queue="emails", kind="testing.add")] == [emails.pk]
    assert [run.job_id for run in run_jobs(kind=jobs.add_async)] == [other_kind.pk]  # a handler names its kind
    assert row(other_queue).state == "available"
    assert [run.job_id for run in run_jobs(queue="reports")] == [other_queue.pk]


def test_run_jobs__scheduled_jobs_run_only_once_now_reaches_them():
    soon = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, run_at=timezone.now() + timedelta(hours=1))
    later = Job.objects.enqueue("testing.add", {"a": 2, "b": 0}, run_at=timezone.now() + timedelta(hours=3))

    assert len(run_jobs()) == 0
    assert [run.job_id for run in run_jobs(now=timezone.now() + timedelta(hours=2))] == [soon.pk]
    assert row(later).state == "scheduled"


def test_run_jobs__a_paused_queue_is_left_waiting_as_a_worker_leaves_it():
    Queue.objects.create(name="paused", paused=True)
    job = Job.objects.enqueue("testing.add", {"a": 1, "b": 0}, queue="paused")

    assert len(run_jobs()) == 0
    assert row(job).state == "available"


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"limit": 0}, ValueError, r"limit is 0; pass a number of attempts of at least 1"),
        ({"limit": True}, ValueError, r"limit is True"),
        ({"now": "tomorrow"}, TypeError, r"now must be a datetime or None, not 'tomorrow'"),
        ({"now": timezone.now().replace(tzinfo=None)}, ValueError, r"now is naive .* pass an aware datetime"),
        ({"kind": 42}, TypeError, r"kind must be a job kind string, a @job handler or a @task, not 42"),
        ({"queue": ["emails"]}, TypeError, r"queue must be a queue name \(str\) or None, not \['emails'\]"),
    ],
)
def test_run_jobs__bad_arguments_are_refused_by_name(options, error, match):
    job = Job.objects.enqueue("testing.add", {"a": 1, "b": 0})
    with pytest.raises(error, match=match):
        run_jobs(**options)
    assert row(job).state == "available"
