"""Durable jobs with the rest: a workflow step that waits for an approval (its dependents wait for
it, and are released once it is signalled), a job fired by a schedule that sleeps, and a parked
job's steps and events deleted by retention once it has finished and passed its retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from awa_django import JobContext, job
from awa_django.models import Job, JobEvent, JobState, JobStep, Schedule
from awa_django.sql import statements
from awa_django.testing import assert_enqueued, enqueued_jobs, run_jobs
from awa_django.worker.scheduler import fire_params, plan_fire
from awa_django.workflows import Workflow

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


@job("compose.order")
def order(order_id: int) -> dict[str, int]:
    return {"order_id": order_id}


@job("compose.approval", takes_context=True)
def approval(context: JobContext) -> dict[str, Any]:
    """A workflow step that waits for a person's approval."""
    placed = context.upstream("order")
    decision = context.wait_for("approved")
    return {"order_id": placed["order_id"], "by": decision["by"]}


@job("compose.ship", takes_context=True)
def ship(context: JobContext) -> str:
    approved = context.upstream("approval")
    return f"shipped {approved['order_id']}, approved by {approved['by']}"


@job("compose.nightly", takes_context=True)
def nightly(context: JobContext, report: str) -> str:
    """Fired by a schedule: gathers, sleeps an hour (a quiet time), then sends."""
    gathered = context.step("gather", lambda: f"{report}: 3 rows")
    context.sleep(3600)
    return context.step("send", lambda: f"sent {gathered}")


def state(job_id: int | None) -> str:
    assert job_id is not None
    return Job.objects.values_list("state", flat=True).get(pk=job_id)


def approval_workflow() -> tuple[Any, Any, Any, Any]:
    wf = Workflow("approve-order")
    placed = wf.add("compose.order", {"order_id": 7}, name="order")
    approve = wf.add("compose.approval", name="approval", after=[placed])
    shipping = wf.add("compose.ship", name="ship", after=[approve])
    audit = wf.add("compose.ship", name="audit", after=[approve])
    wf.enqueue()
    return placed, approve, shipping, audit


def test_workflow__a_step_waits_for_an_approval_and_its_dependents_wait_for_it() -> None:
    placed, approve, shipping, audit = approval_workflow()

    run_jobs(advance=DAY)  # the order runs, the approval parks: a day on, nothing else moves

    assert (state(placed.id), state(approve.id)) == ("completed", "waiting")
    assert state(shipping.id) == state(audit.id) == "waiting"
    assert [j.pk for j in enqueued_jobs(parked=True)] == [approve.id]  # the dependents are not parked
    pending = dict(Job.objects.filter(pk__in=[shipping.id, audit.id]).values_list("pk", "pending"))
    assert pending == {shipping.id: 1, audit.id: 1}

    woke = Job.objects.signal(approve.id, "approved", {"by": "ana"})
    report = run_jobs()

    assert woke.woke
    assert report.kinds == ["compose.approval", "compose.ship", "compose.ship"]
    assert Job.objects.get(pk=approve.id).result == {"order_id": 7, "by": "ana"}
    assert Job.objects.get(pk=shipping.id).result == "shipped 7, approved by ana"
    assert state(audit.id) == "completed"


def test_workflow__a_signal_to_a_step_still_waiting_for_its_upstreams_is_kept_for_its_wait() -> None:
    _, approve, shipping, _ = approval_workflow()

    sent = Job.objects.signal(approve.id, "approved", {"by": "early"})  # before the order has run

    assert not sent.woke and state(approve.id) == "waiting"  # still waiting for its upstream
    run_jobs()  # the order, then the approval (takes the kept event at once), then its dependents
    assert Job.objects.get(pk=shipping.id).result == "shipped 7, approved by early"
    assert not JobEvent.objects.filter(job_id=approve.id).exists()


def _fire(schedule: Schedule, now: datetime | None = None) -> list[int]:
    """The leader's fire of the schedule's due slot (fire_schedule), in this test's transaction,
    as at ``now`` (by default the present)."""
    now = now or datetime.now(UTC)
    assert schedule.next_fire_at is not None
    plan = plan_fire(schedule.name, schedule.cron, schedule.timezone, "coalesce", 100, schedule.next_fire_at, now)
    params = fire_params(schedule.pk, schedule.name, schedule.last_fire_at, schedule.next_fire_at, plan)
    with connection.cursor() as cursor:
        cursor.execute(statements["fire_schedule"], params)
        return list(cursor.fetchone()[1])


def test_cron__a_fired_durable_job_sleeps_without_blocking_the_next_slot() -> None:
    due = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    schedule = Schedule.objects.create(
        name="nightly-report", kind="compose.nightly", cron="* * * * *", args={"report": "sales"}, next_fire_at=due
    )
    [first] = _fire(schedule)

    [parked] = run_jobs()

    assert parked.parked and state(first) == "scheduled"
    fired = Job.objects.get(pk=first)
    assert fired.metadata["schedule"] == "nightly-report" and fired.unique_key  # the slot's key, kept
    assert_enqueued("compose.nightly", parked=True, count=1)
    # The next slot fires while the first job sleeps: another job, its own key.
    fresh = Schedule.objects.get(pk=schedule.pk)
    assert fresh.next_fire_at is not None
    [second] = _fire(fresh, now=fresh.next_fire_at + timedelta(seconds=1))
    assert second != first and Job.objects.get(pk=second).unique_key != fired.unique_key

    report = run_jobs(advance=timedelta(hours=2))

    assert {run.job_id: run.state for run in report if not run.parked} == {first: "completed", second: "completed"}
    assert Job.objects.get(pk=first).result == "sent sales: 3 rows"
    assert JobStep.objects.get(job_id=first, name="gather").attempt == 1


def _retain_completed(older_than: timedelta) -> None:
    """Retention's sweep of completed jobs (delete_finished_jobs, delete_default_finished_jobs:
    where jobs finish in these tests, which have no range partitions), then its sweep of durable
    jobs' records (delete_orphan_steps), from the start of the walk."""
    never = timedelta(days=36500)
    default: dict[str, Any] = {"completed_older_than": older_than, "failed_older_than": never, "limit": 1000}
    with connection.cursor() as cursor:
        hot: dict[str, Any] = {"state": "completed", "older_than": older_than, "limit": 1000}
        cursor.execute(statements["delete_finished_jobs"], hot)
        cursor.execute(statements["delete_default_finished_jobs"], default)
        cursor.execute(statements["delete_orphan_steps"], {"after": 0, "limit": 100_000})


def test_retention__a_parked_job_s_steps_and_events_go_once_it_finished_and_passed_retention() -> None:
    done_job = Job.objects.enqueue("compose.nightly", {"report": "old"})
    still_parked = Job.objects.enqueue("compose.nightly", {"report": "new"})
    run_jobs()  # both park in their sleep
    Job.objects.signal(done_job.pk, "unused")  # events no wait takes: kept with their job
    Job.objects.signal(still_parked.pk, "unused")
    run_jobs(kind="compose.nightly", advance=timedelta(hours=2), limit=1)  # the first one wakes and finishes
    assert state(done_job.pk) == JobState.COMPLETED and state(still_parked.pk) == JobState.SCHEDULED
    _retain_completed(DAY)  # finished, but not past retention yet: its records stay
    assert JobStep.objects.filter(job_id=done_job.pk).count() == 3

    Job.objects.filter(pk=done_job.pk).update(finalized_at=timezone.now() - 2 * DAY)
    _retain_completed(DAY)

    assert not Job.objects.filter(pk=done_job.pk).exists()
    assert not JobStep.objects.filter(job_id=done_job.pk).exists()
    assert not JobEvent.objects.filter(job_id=done_job.pk).exists()
    assert JobStep.objects.filter(job_id=still_parked.pk).count() == 2  # a parked job keeps its records
    assert JobEvent.objects.filter(job_id=still_parked.pk).count() == 1
