"""A workflow step's per-attempt log line names its workflow (``workflow_id=`` in the message and
the structured record); a plain job's does not. The claim returns the id with the row (here the
testing helpers' claim_due_jobs; the worker's claim statements are decoded into the same
``ClaimedJob``, whose row factory refuses a statement that leaves a field out)."""

from __future__ import annotations

import logging

import pytest
from django.utils import timezone

from awa_django.context import Outcome
from awa_django.inline.attempt import claim
from awa_django.models import Job
from awa_django.observability.joblog import report_outcome
from awa_django.observability.sink import NoopSink
from awa_django.registry import registry
from awa_django.states import JobState
from awa_django.workflows import Workflow
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def test_attempt_log__a_step_carries_its_workflow_id_and_a_plain_job_none(caplog: pytest.LogCaptureFixture) -> None:
    wf = Workflow("logged")
    first = wf.add("wf.value", {"value": 1}, name="first")
    wf.add("wf.value", {"value": 2}, name="second", after=[first])
    wf.enqueue()
    plain = Job.objects.enqueue("wf.value", {"value": 3})

    claimed = {job.id: job for job in claim("default", ids=[first.id, plain.pk], now=timezone.now(), limit=10)}
    assert (claimed[first.id].workflow_id, claimed[plain.pk].workflow_id) == (wf.id, None)

    with caplog.at_level(logging.DEBUG, logger="awa_django.jobs"):
        for job in claimed.values():
            report_outcome(NoopSink(), registry, job, Outcome(JobState.FAILED, error={"error": "x"}), 0.01, True)

    by_job = {r.job_id: r for r in caplog.records if r.name == "awa_django.jobs"}  # type: ignore[attr-defined]
    assert by_job[first.id].workflow_id == wf.id  # type: ignore[attr-defined]
    assert f"workflow_id={wf.id}" in by_job[first.id].getMessage()
    assert not hasattr(by_job[plain.pk], "workflow_id")
    assert "workflow_id" not in by_job[plain.pk].getMessage()
