"""run_jobs and the assertions with durable jobs: sleeps run through without waiting real time
(``now=`` / ``advance=``), a signal sent in the test wakes its job for the next run_jobs, and
parked jobs are enqueued jobs (``parked=`` picks them)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django.models import Job, JobStep
from awa_django.sql import statements
from awa_django.testing import assert_enqueued, assert_not_enqueued, enqueued_jobs, run_jobs
from testproject.demo.models import Execution
from tests.testing import jobs  # noqa: F401 - registers the testing.* kinds

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)


def row(job: Job) -> Job:
    job.refresh_from_db()
    return job


def wake_at(job: Job, name: str):
    return JobStep.objects.get(job_id=job.pk, name=name).wake_at


def test_run_jobs__a_sleep_parks_the_job_and_the_report_says_so():
    job = Job.objects.enqueue("testing.nap", {"hours": [1]})

    report = run_jobs()

    assert [(run.job_id, run.state, run.parked) for run in report.parked] == [(job.pk, "scheduled", True)]
    assert report.snoozed == []  # a park is not a snooze
    assert "(parked)" in str(report[0])
    assert row(job).state == "scheduled"
    assert run_jobs().runs == ()  # its wake time is an hour away: nothing is due
    assert Execution.objects.filter(job_id=job.pk).count() == 1


def test_run_jobs__now_past_the_wake_time_resumes_the_sleeper_and_its_steps_are_not_run_again():
    job = Job.objects.enqueue("testing.nap", {"hours": [1]})
    run_jobs()

    report = run_jobs(now=wake_at(job, "sleep#1") + timedelta(seconds=1))

    assert [run.state for run in report] == ["completed"]
    assert Execution.objects.filter(job_id=job.pk).count() == 2  # "first" ran once, then "after-sleep-0"
    assert row(job).result == list(Execution.objects.filter(job_id=job.pk).order_by("pk").values_list("pk", flat=True))


def test_run_jobs__now_short_of_the_wake_time_leaves_the_sleeper_parked():
    job = Job.objects.enqueue("testing.nap", {"hours": [1]})
    run_jobs()

    assert run_jobs(now=wake_at(job, "sleep#1") - timedelta(seconds=5)).runs == ()
    assert row(job).state == "scheduled"


def test_run_jobs__a_sleep_begun_in_a_later_now_counts_from_that_now():
    job = Job.objects.enqueue("testing.nap", {"hours": [1, 1]})
    run_jobs()
    first_wake = wake_at(job, "sleep#1")

    report = run_jobs(now=first_wake + timedelta(minutes=1))

    assert [run.state for run in report] == ["scheduled"]  # woke, then parked in the second sleep
    second_wake = wake_at(job, "sleep#2")
    assert second_wake - (first_wake + timedelta(minutes=1)) >= HOUR - timedelta(seconds=1)
    assert row(job).run_at >= second_wake - timedelta(seconds=1)  # due at its wake time, not before
    assert run_jobs(now=second_wake - timedelta(seconds=5)).runs == ()
    assert [run.state for run in run_jobs(now=second_wake + timedelta(seconds=1))] == ["completed"]
    assert Execution.objects.filter(job_id=job.pk).count() == 3


@pytest.mark.parametrize("kind", ["testing.nap", "testing.nap_async"])
def test_run_jobs__advance_runs_through_every_sleep_within_it_in_time_order(kind):
    args = {"hours": [1, 2, 3]} if kind == "testing.nap" else {"hours": 5}
    job = Job.objects.enqueue(kind, args)

    report = run_jobs(advance=timedelta(hours=7))

    assert [run.state for run in report][-1] == "completed"
    assert all(run.parked for run in report.runs[:-1]) and report.runs[-1].attempt == 1
    assert row(job).state == "completed"


def test_run_jobs__advance_stops_at_its_horizon():
    job = Job.objects.enqueue("testing.nap", {"hours": [1, 2, 3]})

    report = run_jobs(advance=timedelta(hours=2))  # wakes at 1 h, then sleeps to 3 h: past the horizon

    assert [run.state for run in report] == ["scheduled", "scheduled"]
    assert set(JobStep.objects.filter(job_id=job.pk).values_list("name", flat=True)) == {
        "first",
        "sleep#1",
        "after-sleep-0",
        "sleep#2",
    }
    assert row(job).state == "scheduled"


def test_run_jobs__a_signal_sent_in_the_test_wakes_the_waiter_for_the_next_run():
    job = Job.objects.enqueue("testing.approve", {})
    assert [run.state for run in run_jobs()] == ["waiting"]
    assert run_jobs().runs == ()  # parked: nothing to run

    Job.objects.signal(job.pk, "approved", {"by": "ana"})
    [run] = run_jobs()

    assert (run.state, run.result) == ("completed", {"by": "ana"})


def test_run_jobs__a_wait_times_out_once_now_passes_its_deadline():
    job = Job.objects.enqueue("testing.approve", {"timeout_hours": 24})
    [parked] = run_jobs()
    assert (parked.state, parked.parked) == ("scheduled", True)

    assert run_jobs(advance=timedelta(hours=23)).runs == ()
    [run] = run_jobs(advance=timedelta(hours=25))

    assert (run.state, run.result) == ("completed", "timed out")
    assert row(job).attempt == 1  # the parked attempt was given back


def test_assert_enqueued__sees_sleeping_and_waiting_jobs_and_parked_picks_them():
    sleeper = Job.objects.enqueue("testing.nap", {"hours": [1]})
    waiter = Job.objects.enqueue("testing.approve", {})
    run_jobs()
    plain = Job.objects.enqueue("testing.add", {"a": 1, "b": 2})

    assert assert_enqueued("testing.nap", parked=True) == [sleeper]
    assert assert_enqueued("testing.approve", parked=True) == [waiter]  # state "waiting": enqueued too
    assert enqueued_jobs(parked=True) == [sleeper, waiter]
    assert enqueued_jobs(parked=False) == [plain]
    assert enqueued_jobs() == [sleeper, waiter, plain]
    assert_not_enqueued("testing.add", parked=True)
    with pytest.raises(AssertionError) as raised:
        assert_enqueued("testing.add", parked=True)
    message = str(raised.value)
    assert message.startswith("expected at least 1 waiting parked job of kind 'testing.add', found 0\n")
    assert f"#{waiter.pk} 'testing.approve' queue='default' args={{}} state=waiting, parked" in message
    assert "parked: expected a job parked in a sleep or a wait" in message

    Job.objects.signal(waiter.pk, "approved")  # woken: available, no longer parked
    assert enqueued_jobs(parked=True) == [sleeper]
    assert waiter in enqueued_jobs(parked=False)


def test_assert_enqueued__a_workflow_step_waiting_for_its_upstreams_is_not_enqueued():
    job = Job.objects.enqueue("testing.add", {"a": 1, "b": 2})
    Job.objects.filter(pk=job.pk).update(state="waiting")  # as a workflow step whose upstreams run

    assert_not_enqueued("testing.add")


def test_run_jobs__the_clock_moved_on_stays_for_the_test_so_a_sleep_gone_past_stays_over():
    job = Job.objects.enqueue("testing.nap", {"hours": [1, 1]})
    run_jobs(advance=timedelta(minutes=90))  # past the first sleep, parked in the second
    assert set(JobStep.objects.filter(job_id=job.pk).values_list("name", flat=True)) >= {"sleep#2"}
    Job.objects.filter(pk=job.pk).update(state="available", run_at=timezone.now() - HOUR)  # "run now"

    [run] = run_jobs()  # replays through sleep#1 (an hour on): over; sleep#2 is not, so it parks again

    assert run.parked and Execution.objects.filter(job_id=job.pk).count() == 2
    assert row(job).run_at == wake_at(job, "sleep#2")  # parked in sleep#2, not back in sleep#1


def test_run_jobs__the_kept_clock_goes_with_the_savepoint_it_was_set_in():
    def kept() -> object:
        with connection.cursor() as cursor:
            cursor.execute(statements["read_test_clock"])
            return cursor.fetchone()[0]

    Job.objects.enqueue("testing.nap", {"hours": [1]})
    with pytest.raises(RuntimeError), transaction.atomic():  # as a TestCase's test is a savepoint
        run_jobs(advance=timedelta(hours=2))
        assert kept() is not None
        raise RuntimeError("roll the savepoint back")
    assert kept() is None


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: run_jobs(advance=3600), ValueError, r"advance is 3600; pass a timedelta of 0 or more"),  # type: ignore[arg-type]
        (lambda: run_jobs(advance=-HOUR), ValueError, r"advance is datetime.timedelta\(days=-1, seconds=82800\); pass"),
        (lambda: enqueued_jobs(parked="yes"), TypeError, r"parked must be True .* not 'yes'"),  # type: ignore[arg-type]
    ],
)
def test_durable_helpers__bad_arguments_are_refused_by_name(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_the_guides_durable_snippet_runs_as_written():
    """docs/how-to/testing.md's durable snippet, line for line (``orders.remind`` is in tests/testing/jobs.py)."""
    job = Job.objects.enqueue("orders.remind", {"order_id": 7})  # sleeps a day, then waits for "paid"
    run_jobs()  # parks in its sleep
    assert_enqueued("orders.remind", parked=True)
    run_jobs(advance=timedelta(days=1))  # wakes, then parks in its wait
    Job.objects.signal(job.id, "paid", {"amount": 1200})
    assert run_jobs().completed

    assert row(job).result == {"order": 7, "paid": {"amount": 1200}}
