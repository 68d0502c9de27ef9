"""Retention's sweep (delete_finished_jobs and delete_default_finished_jobs, the maintenance leader's
statements; tests/test_storage.py drops whole partitions) takes a deleted job's
in-edges with it, and a workflow's row once none of its jobs is left: awa_job_edge and awa_workflow
stay as large as the jobs kept, not as every workflow that ever ran."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from awa_django.models import Job, JobEdge, JobState
from awa_django.models import Workflow as WorkflowRow
from awa_django.sql import statements
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def retain(state: str, older_than: timedelta, limit: int = 1000) -> int:
    """One batch of retention's sweep: the finished jobs of ``state`` left in the hot table, and
    those in awa_job_done's DEFAULT partitions (where a job finishes while no range partition
    exists, as in these tests: the leader creates them)."""
    hot: dict[str, Any] = {"state": state, "older_than": older_than, "limit": limit}
    never = timedelta(days=36500)
    default: dict[str, Any] = {
        "completed_older_than": older_than if state == JobState.COMPLETED else never,
        "failed_older_than": older_than if state != JobState.COMPLETED else never,
        "limit": limit,
    }
    with connection.cursor() as cursor:
        cursor.execute(statements["delete_finished_jobs"], hot)
        deleted = len(cursor.fetchall())
        cursor.execute(statements["delete_default_finished_jobs"], default)
        return deleted + len(cursor.fetchall())


def test_retention__deleted_jobs_take_their_in_edges_and_an_emptied_workflow_its_row() -> None:
    plain = Job.objects.enqueue("wf.value", {"value": 1})  # an upstream outside the workflow, by id
    wf = Workflow("retained")
    a = wf.add("wf.value", {"value": 2}, name="a")
    b = wf.add("wf.sum", name="b", after=[a, plain.pk])
    wf.enqueue()
    assert wf.id is not None
    kept = Workflow("kept")
    kept.add("wf.value", {"value": 3})
    kept.enqueue()
    run_jobs()
    Job.objects.filter(pk__in=[plain.pk, a.id]).update(finalized_at=timezone.now() - timedelta(days=2))

    # The upstreams go first: b, still kept, keeps the edges naming them (their rows are gone).
    assert retain(JobState.COMPLETED, timedelta(days=1)) == 2
    assert JobEdge.objects.filter(downstream_id=b.id).count() == 2
    assert WorkflowRow.objects.filter(pk=wf.id).exists()

    Job.objects.filter(pk=b.id).update(finalized_at=timezone.now() - timedelta(days=2))
    assert retain(JobState.COMPLETED, timedelta(days=1)) == 1

    assert not JobEdge.objects.exists()
    assert list(WorkflowRow.objects.values_list("pk", flat=True)) == [kept.id]


def test_retention__a_workflow_deleted_across_batches_loses_its_row_with_the_last_batch() -> None:
    wf = Workflow("batches")
    head = wf.add("wf.value", {"value": 0}, name="head")
    for i in range(5):
        wf.add("wf.value", {"value": i}, name="part", after=[head])
    wf.enqueue()
    assert wf.id is not None
    run_jobs()
    Job.objects.update(finalized_at=timezone.now() - timedelta(days=2))

    counts = []
    while (deleted := retain(JobState.COMPLETED, timedelta(days=1), limit=2)) == 2:
        counts.append((deleted, WorkflowRow.objects.filter(pk=wf.id).exists()))
    counts.append((deleted, WorkflowRow.objects.filter(pk=wf.id).exists()))

    assert counts == [(2, True), (2, True), (2, False), (0, False)]  # the last batch is the short one
    assert not JobEdge.objects.exists()
