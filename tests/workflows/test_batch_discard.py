"""``Batch(on_discard=...)``: the callback runs as soon as one job of the batch fails for good or is
cancelled, once, and is cancelled (saying why) when every job completed; beside on_success and
on_finish, whose rules it does not change."""

from __future__ import annotations

import pytest

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job, JobState
from awa_django.services.jobs import cancel_jobs
from awa_django.testing import run_jobs
from awa_django.workflows import Batch, Upstream, Workflow, chain, step
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def state(job_id: int) -> str:
    return Job.objects.get(pk=job_id).state


def callbacks() -> dict[str, object]:
    return {
        "on_success": step("wf.sum", name="ok"),
        "on_finish": step("wf.sum", name="done"),
        "on_discard": step("wf.sum", name="discarded"),
    }


def test_batch__one_failed_job_runs_on_discard_cancels_on_success_and_runs_on_finish() -> None:
    batch = Batch("nightly", **callbacks())  # type: ignore[arg-type]
    batch.add("wf.value", {"value": 1}, name="member")
    batch.add("wf.fail", name="member")
    batch.add("wf.value", {"value": 2}, name="member")
    batch.enqueue()
    ok, done, discarded = batch.steps[-3:]

    run_jobs(raise_on_failure=False)

    assert [state(s.id) for s in (ok, done, discarded)] == ["cancelled", "completed", "completed"]
    assert Job.objects.get(pk=discarded.id).result == 1 + 2  # it read the completed members' results


def test_batch__on_discard_is_released_by_the_first_failure_before_the_others_end() -> None:
    batch = Batch("early", on_discard=step("wf.sum", name="discarded"))
    bad = batch.add("wf.fail", name="bad")
    slow = batch.add("wf.value", {"value": 5}, name="slow")
    batch.enqueue()
    discarded = batch.steps[-1]

    run_jobs(kind="wf.fail", raise_on_failure=False)

    assert (state(bad.id), state(slow.id), state(discarded.id)) == ("failed", "available", "available")
    run_jobs()
    # The later completion finds the callback no longer waiting: it ran once, and stays completed.
    assert (state(slow.id), state(discarded.id)) == ("completed", "completed")
    assert Job.objects.get(pk=discarded.id).attempt == 1


def test_batch__every_job_completed_cancels_on_discard_saying_why() -> None:
    batch = Batch("clean", **callbacks())  # type: ignore[arg-type]
    for i in range(3):
        batch.add("wf.value", {"value": i}, name="member")
    batch.enqueue()
    ok, done, discarded = batch.steps[-3:]

    run_jobs()

    assert [state(s.id) for s in (ok, done, discarded)] == ["completed", "completed", "cancelled"]
    error = Job.objects.get(pk=discarded.id).errors[-1]["error"]
    assert "every upstream job completed" in error and "on_discard" in error


def test_batch__a_cancelled_job_counts_as_discarded_and_the_cancellation_of_on_discard_cascades() -> None:
    batch = Batch("cancel", on_discard=step("wf.sum", name="discarded"))
    first = batch.add("wf.value", {"value": 1}, name="member")
    batch.add("wf.value", {"value": 2}, name="member")
    batch.enqueue()
    discarded = batch.steps[-1]

    cancel_jobs([first.id])

    assert state(discarded.id) == JobState.AVAILABLE

    # Every job completed: the callback is cancelled, and so is the step after it (next level).
    clean = Batch("cascade", on_discard=chain(step("wf.sum", name="discarded"), step("wf.sum", name="report")))
    clean.add("wf.value", {"value": 1}, name="member")
    clean.enqueue()
    callback, report = clean.steps[-2:]

    run_jobs()

    assert (state(callback.id), state(report.id)) == (JobState.CANCELLED, JobState.CANCELLED)
    assert (
        f"upstream job {callback.id} (discarded) ended cancelled" in Job.objects.get(pk=report.id).errors[-1]["error"]
    )


def test_on_discard_edges__mixed_with_another_policy_or_from_an_existing_job_are_refused() -> None:
    mixed = Workflow("mixed")
    a = mixed.add("wf.value", name="a")
    b = mixed.add("wf.value", name="b")
    mixed.add("wf.sum", after=[Upstream(a, "on_discard"), b])
    with pytest.raises(InvalidJobError, match="mixes on_discard edges with 'on_success'"):
        mixed.enqueue()

    existing = Job.objects.enqueue("wf.value", {"value": 1})
    by_id = Workflow("by-id")
    by_id.add("wf.sum", after=[Upstream(existing.pk, "on_discard")])
    with pytest.raises(InvalidJobError, match="not an existing job id"):
        by_id.enqueue()
    assert Job.objects.count() == 1
