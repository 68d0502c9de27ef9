"""``retry_jobs`` (the admin's Retry) of one workflow step keeps it in its graph: it waits for its
upstream jobs that have not ended, and its end releases its waiting dependents once, not twice."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections

from awa_django.models import Job
from awa_django.services.jobs import cancel_jobs, retry_jobs
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow, always
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def test_retry_jobs__a_cancelled_step_waits_again_for_its_upstream_that_has_not_run() -> None:
    wf = Workflow("retry-one-step")
    first = wf.add("wf.value", {"value": 1}, name="first", queue="later")
    second = wf.add("wf.sum", name="second", after=[first])
    wf.enqueue()
    assert cancel_jobs([second.id]) == 1

    assert retry_jobs([second.id]) == 1
    run_jobs(queue="default")  # before the fix: second ran here, before first, reading no result

    assert Job.objects.get(pk=first.id).state == "available"
    assert Job.objects.filter(pk=second.id).values_list("state", "pending").get() == ("waiting", 1)
    run_jobs()
    assert Job.objects.get(pk=second.id).state == "completed", Job.objects.get(pk=second.id).errors
    assert Job.objects.get(pk=second.id).result == 1
    finished, started = Job.objects.get(pk=first.id).finalized_at, Job.objects.get(pk=second.id).attempted_at
    assert finished is not None and started is not None
    assert finished <= started


def test_retry_jobs__a_retried_upstream_releases_its_waiting_dependent_once_not_twice() -> None:
    wf = Workflow("retry-upstream")
    early = wf.add("wf.value", {"value": 1}, name="early")
    slow = wf.add("wf.value", {"value": 2}, name="slow", queue="later")
    last = wf.add("wf.sum", name="last", after=[always(early), slow])
    wf.enqueue()
    assert cancel_jobs([early.id]) == 1  # consumes early -> last: last now waits for slow alone

    assert retry_jobs([early.id]) == 1
    run_jobs(queue="default")  # early completes; before the fix its end counted again and ran last

    assert Job.objects.get(pk=early.id).state == "completed"
    assert Job.objects.get(pk=slow.id).state == "available"
    assert Job.objects.get(pk=last.id).state == "waiting"
    run_jobs()
    assert Job.objects.get(pk=last.id).state == "completed"
    assert Job.objects.get(pk=last.id).result == 1 + 2


@pytest.mark.django_db(transaction=True)
def test_retry_jobs__skip_locked_leaves_a_step_whose_upstream_another_transaction_holds() -> None:
    """The admin's bulk retry skips rows a worker holds; an upstream held (being ended, perhaps)
    has no state to count yet, so its step is left for later rather than made to wait for an end
    that may already have been released."""
    wf = Workflow("retry-held")
    first = wf.add("wf.value", {"value": 1}, name="first", queue="later")
    second = wf.add("wf.sum", name="second", after=[first])
    wf.enqueue()
    assert cancel_jobs([second.id]) == 1
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        other = connections.create_connection("default")
        with other.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM awa_job WHERE id = %s FOR UPDATE", [first.id])
            locked.set()
            release.wait(20)
            cursor.execute("ROLLBACK")
        other.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(20)
        assert retry_jobs([second.id], skip_locked=True) == 0
        assert Job.objects.get(pk=second.id).state == "cancelled"
    finally:
        release.set()
        holder.join()
    assert retry_jobs([second.id], skip_locked=True) == 1
    assert Job.objects.get(pk=second.id).state == "waiting"
    connection.close()
