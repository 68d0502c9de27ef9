"""The service functions behind the admin actions: each changes the right rows and nothing else."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from awa_django import JobContext
from awa_django.exceptions import InvalidJobError
from awa_django.models import Job, JobState, Queue
from awa_django.registry import JobHandler, Registry
from awa_django.services.jobs import CANCELLABLE_FROM, cancel_jobs, discard_jobs, retry_jobs
from awa_django.services.queues import pause_queues, resume_queues
from tests.admin.conftest import messages_of
from tests.factories import JobFactory, QueueFactory
from tests.harness import make_config, running_worker, wait_until

ALL_STATES = [s.value for s in JobState]


def one_job_per_state() -> dict[str, Job]:
    now = timezone.now()
    jobs: dict[str, Job] = {}
    for state in ALL_STATES:
        finished = state in ("completed", "failed", "cancelled")
        jobs[state] = JobFactory(
            state=state, attempt=3, max_attempts=3, finalized_at=now if finished else None,
            heartbeat_at=now if state == "running" else None,
        )  # fmt: skip
    return jobs


def snapshot() -> dict[int, tuple[Any, ...]]:
    return {
        row[0]: row[1:]
        for row in Job.objects.values_list("id", "state", "attempt", "max_attempts", "run_at", "finalized_at")
    }


@pytest.mark.django_db
def test_retry_jobs__failed_and_cancelled_become_available_now_with_the_attempt_kept() -> None:
    jobs = one_job_per_state()
    before = snapshot()
    started = timezone.now()

    assert retry_jobs([j.pk for j in jobs.values()]) == 2

    after = snapshot()
    for state in ("failed", "cancelled"):
        retried = Job.objects.get(pk=jobs[state].pk)
        assert retried.state == "available"
        assert retried.attempt == 3  # kept
        assert retried.max_attempts == 4  # raised: all 3 attempts were used, so it can run once more
        assert retried.finalized_at is None
        assert retried.run_at >= started
    untouched = {pk: row for pk, row in before.items() if pk not in (jobs["failed"].pk, jobs["cancelled"].pk)}
    assert {pk: after[pk] for pk in untouched} == untouched


@pytest.mark.django_db
def test_retry_jobs__keeps_max_attempts_that_still_allow_a_run() -> None:
    job = JobFactory(state="failed", attempt=1, max_attempts=5, finalized_at=timezone.now())
    assert retry_jobs([job.pk]) == 1
    job.refresh_from_db()
    assert (job.state, job.attempt, job.max_attempts) == ("available", 1, 5)


def _unique_job_whose_key_is_taken() -> Job:
    Job.objects.enqueue("report", {"day": 1}, unique=True)
    old = JobFactory(kind="report", state="failed", finalized_at=timezone.now())
    Job.objects.filter(pk=old.pk).update(
        unique_key=Job.objects.exclude(pk=old.pk).get().unique_key, unique_states=list(CANCELLABLE_FROM)
    )
    return old


@pytest.mark.django_db
def test_retry_jobs__skips_a_unique_job_whose_key_is_taken_again() -> None:
    old = _unique_job_whose_key_is_taken()
    other = JobFactory(state="failed", finalized_at=timezone.now())

    assert retry_jobs([old.pk, other.pk]) == 1

    assert Job.objects.get(pk=old.pk).state == "failed"
    assert Job.objects.get(pk=other.pk).state == "available"


@pytest.mark.django_db
def test_retry_in_the_admin__a_failed_job_kept_for_its_unique_key_says_so(admin_client: Client) -> None:
    """The job is failed, so "nothing to retry in its current state" and "only failed or cancelled
    jobs are retried" (what the page and the action said) were wrong: the operator was told the
    state is the reason, and had no way to learn that another job holds the key."""
    old = _unique_job_whose_key_is_taken()
    other = JobFactory(state="failed", finalized_at=timezone.now())

    page = messages_of(admin_client.post(f"/admin/awa/job/{old.pk}/act/retry/", follow=True))
    action = messages_of(
        admin_client.post(
            "/admin/awa/job/",
            {"action": "retry_selected", "_selected_action": [str(old.pk), str(other.pk)]},
            follow=True,
        )
    )

    assert Job.objects.get(pk=old.pk).state == "failed"
    assert Job.objects.get(pk=other.pk).state == "available"
    assert len(page) == 1 and "unique key" in page[0] and "current state" not in page[0], page
    assert len(action) == 1 and action[0].startswith("Retried 1 of 2 selected job(s)."), action
    assert "1 failed or cancelled job(s) kept: another job holds its unique key" in action[0], action


@pytest.mark.django_db
def test_cancel_jobs__every_unfinished_state_becomes_cancelled_and_finished_ones_stay() -> None:
    jobs = one_job_per_state()
    before = snapshot()

    assert cancel_jobs([j.pk for j in jobs.values()]) == 5  # waiting, scheduled, available, running, retryable

    states = dict(Job.objects.values_list("id", "state"))
    for state, job in jobs.items():
        expected = state if state in ("completed", "failed", "cancelled") else "cancelled"
        assert states[job.pk] == expected, state
        if expected == state:
            assert snapshot()[job.pk] == before[job.pk]
    assert Job.objects.get(pk=jobs["running"].pk).finalized_at is not None


@pytest.mark.django_db
def test_discard_jobs__deletes_exactly_the_given_jobs() -> None:
    jobs = one_job_per_state()
    keep = JobFactory()
    doomed = [jobs["failed"].pk, jobs["running"].pk, jobs["completed"].pk]

    assert discard_jobs([*doomed, 10**12]) == 3

    assert set(Job.objects.values_list("pk", flat=True)) == {j.pk for j in jobs.values()} - set(doomed) | {keep.pk}


@pytest.mark.django_db
@pytest.mark.parametrize("action", [retry_jobs, cancel_jobs, discard_jobs])
@pytest.mark.parametrize("ids", ["12", b"12", 12, [True], [1.9], [" 1"], ["1_2"], ["\uff11"]], ids=repr)
def test_actions__refuse_what_is_not_a_list_of_job_ids_touching_nothing(action: Callable[..., int], ids: Any) -> None:
    # cancel_jobs("12") iterated the string and cancelled jobs 1 and 2; discard_jobs("12") deleted them.
    jobs = [JobFactory(state=state) for state in ("failed", "available", "cancelled") for _ in range(4)]
    before = snapshot()

    with pytest.raises(InvalidJobError, match=r"ids=.*job ids"):
        action(ids)

    assert snapshot() == before
    assert len(before) == len(jobs)


@pytest.mark.django_db
def test_actions__take_ids_as_ints_or_their_decimal_digits() -> None:
    jobs = [JobFactory(state="failed") for _ in range(3)]

    assert retry_jobs([jobs[0].pk, str(jobs[1].pk)]) == 2
    assert Job.objects.get(pk=jobs[2].pk).state == "failed"


@pytest.mark.django_db
def test_actions__accept_no_ids_without_touching_the_database(django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        assert retry_jobs([]) == 0
        assert cancel_jobs([]) == 0
        assert discard_jobs([]) == 0
        assert pause_queues([]) == 0
        assert resume_queues([]) == 0


@pytest.mark.django_db
def test_pause_and_resume_queues__change_only_the_named_queues() -> None:
    emails = QueueFactory(name="emails")
    reports = QueueFactory(name="reports", paused=True)
    other = QueueFactory(name="other")

    assert pause_queues(["emails", "reports", "new"]) == 2  # emails, and the new row
    assert dict(Queue.objects.values_list("name", "paused")) == {
        "emails": True, "reports": True, "other": False, "new": True,
    }  # fmt: skip
    new = Queue.objects.get(name="new")
    assert (new.max_workers, new.min_workers, new.weight) == (50, 0, 1)

    assert resume_queues(["emails", "other", "missing"]) == 1
    assert dict(Queue.objects.values_list("name", "paused")) == {
        "emails": False, "reports": True, "other": False, "new": True,
    }  # fmt: skip
    assert Queue.objects.get(pk=emails.pk).updated_at > emails.updated_at
    assert Queue.objects.get(pk=other.pk).updated_at == other.updated_at
    assert Queue.objects.get(pk=reports.pk).updated_at == reports.updated_at


def cancel_waiter(seen: dict[str, Any], started: threading.Event, seconds: float) -> Callable[[JobContext], str]:
    """A handler that says it started, then waits up to ``seconds`` for its context to be cancelled,
    and records in ``seen`` whether it was."""

    def wait_for_cancel(context: JobContext) -> str:
        started.set()
        deadline = time.monotonic() + seconds
        while not context.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        seen["cancelled"] = context.cancelled
        return "stopped"

    return wait_for_cancel


@pytest.mark.django_db(transaction=True)
def test_cancel_jobs__reaches_the_handler_of_a_running_job_through_its_worker() -> None:
    seen: dict[str, Any] = {}
    started = threading.Event()

    wait_for_cancel = cancel_waiter(seen, started, 30)

    registry = Registry()
    registry.register(JobHandler("wait_for_cancel", wait_for_cancel, takes_context=True))
    # Heartbeats far apart: the NOTIFY, not a heartbeat noticing the row changed, must tell the handler.
    config = make_config(["default"], heartbeat_interval=20.0, heartbeat_staleness=60.0)
    job = Job.objects.enqueue("wait_for_cancel")
    other = Job.objects.enqueue("wait_for_cancel", run_at=timezone.now() + timedelta(hours=1))

    with running_worker(config, registry=registry) as worker:
        assert started.wait(20), "the handler never started"
        assert Job.objects.get(pk=job.pk).state == "running"
        # The startup look claims before the LISTEN connection is up: a cancel then is found only by
        # the next heartbeat (20 s here). This test is about the NOTIFY: cancel once it listens.
        wait_until(lambda: worker.listener.listening, timeout=20, what="the worker's LISTEN in place")

        assert cancel_jobs([job.pk]) == 1

        wait_until(lambda: "cancelled" in seen, timeout=10, what="the handler to see context.cancelled")
        wait_until(lambda: job.pk not in worker.in_flight, timeout=10, what="the job to leave the worker")

    assert seen["cancelled"] is True
    job.refresh_from_db()
    assert job.state == "cancelled"
    assert job.result is None  # the handler's late return did not overwrite the cancelled row
    assert Job.objects.get(pk=other.pk).state == "scheduled"
    connection.close()


@pytest.mark.django_db
def test_cancel_jobs__a_reason_with_a_nul_character_still_cancels_and_is_recorded_without_it() -> None:
    """A reason passed by code (from a form or an API, say) with a NUL failed the whole cancel with
    a DataError (Postgres text cannot hold NUL); the admin's own form already dropped NUL."""
    job = JobFactory(state="available")

    assert cancel_jobs([job.pk], reason="by ops:\x00 stuck") == 1

    job.refresh_from_db()
    assert job.state == "cancelled"
    assert [e["error"] for e in job.errors] == ["cancelled: by ops: stuck"]
