"""retry_workflow under run_jobs: a re-armed job's second end must not release its dependents twice,
and a callback cancelled by design must not be re-armed into running."""

from __future__ import annotations

from typing import Any

import pytest

from awa_django import JobContext, job
from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows import Batch, Workflow, always, chain, step
from awa_django.workflows.services import retry_workflow
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def _id(wf: Workflow) -> int:
    assert wf.id is not None  # set by enqueue()
    return wf.id


def test_retry_workflow__a_dependent_still_waiting_is_not_released_twice_by_a_retried_upstream() -> None:
    wf = Workflow("retry-waiting")
    bad = wf.add("wf.fail", name="bad")
    slow = wf.add("wf.value", {"value": 1}, name="slow", queue="later")
    final = wf.add("wf.value", {"value": 9}, name="final", after=[always(bad), slow])
    wf.enqueue()

    run_jobs(queue="default", raise_on_failure=False)  # bad fails; slow (another queue) has not run
    assert Job.objects.get(pk=bad.id).state == "failed"
    assert Job.objects.get(pk=final.id).pending == 1  # waits for slow alone

    assert retry_workflow(_id(wf)) == 1  # bad runs again
    run_jobs(queue="default", raise_on_failure=False)  # bad fails again

    # final still waits for slow, which has not run
    assert Job.objects.get(pk=slow.id).state == "available"
    assert Job.objects.get(pk=final.id).state == "waiting"
    assert Job.objects.get(pk=final.id).pending == 1

    run_jobs(raise_on_failure=False)  # slow runs, then final
    assert Job.objects.get(pk=final.id).state == "completed"


def test_retry_workflow__a_batch_that_all_completed_does_not_run_its_on_discard_callback() -> None:
    batch = Batch(
        "all-good",
        on_discard=chain(step("wf.value", {"value": "discarded"}, name="discard"), step("wf.value", name="then")),
    )
    batch.add("wf.value", {"value": 1}, name="m")
    batch.add("wf.value", {"value": 2}, name="m")
    batch.enqueue()
    run_jobs()
    callbacks = [s for s in batch.steps if s.name in ("discard", "then")]
    assert {Job.objects.get(pk=s.id).state for s in callbacks} == {"cancelled"}  # every job completed

    assert retry_workflow(_id(batch)) == 0  # nothing failed: nothing to re-arm
    run_jobs()

    assert {Job.objects.get(pk=s.id).state for s in callbacks} == {"cancelled"}  # nothing was discarded


@job("wf.retry.approval", takes_context=True)
def approval(context: JobContext) -> Any:
    """A "finally" step that parks until someone approves."""
    return context.wait_for("approved")


def test_retry_workflow__a_dependent_parked_in_a_durable_wait_is_not_touched_by_a_retried_upstream() -> None:
    wf = Workflow("retry-parked")
    bad = wf.add("wf.fail", name="bad")
    approve = wf.add("wf.retry.approval", name="approve", after=[always(bad)])
    wf.enqueue()
    run_jobs(raise_on_failure=False)  # bad fails; approve runs and parks in its wait
    assert Job.objects.get(pk=approve.id).state == "waiting"

    assert retry_workflow(_id(wf)) == 1  # bad runs again (and fails again)
    run_jobs(raise_on_failure=False)

    # the parked step still waits for its event, and the event wakes it
    assert Job.objects.get(pk=approve.id).state == "waiting"
    assert Job.objects.signal(approve.id, "approved", {"by": "ana"}).woke
    run_jobs()
    assert Job.objects.get(pk=approve.id).result == {"by": "ana"}


@job("wf.retry.stepped", takes_context=True)
def stepped(context: JobContext) -> Any:
    return context.step("fetch", lambda: 1)


def test_restart_from_step__a_completed_step_s_dependent_still_waiting_is_not_released_twice() -> None:
    from awa_django.services.steps import restart_from_step

    wf = Workflow("restart-waiting")
    first = wf.add("wf.retry.stepped", name="first")
    slow = wf.add("wf.value", {"value": 1}, name="slow", queue="later")
    final = wf.add("wf.value", {"value": 9}, name="final", after=[first, slow])
    wf.enqueue()
    run_jobs(queue="default")  # first completes; slow (another queue) has not run
    assert Job.objects.get(pk=final.id).pending == 1

    restart_from_step(first.id, "fetch")
    run_jobs(queue="default")  # first completes again

    assert Job.objects.get(pk=slow.id).state == "available"
    assert Job.objects.get(pk=final.id).state == "waiting"  # still waits for slow
