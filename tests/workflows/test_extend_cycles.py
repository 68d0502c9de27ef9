"""Dynamic fan-out: a step added to a running workflow sits before the jobs that wait for the
extending job; also waiting for one of those (or a job after them) would be a cycle that nothing
releases, and is refused at enqueue, naming the step and the job."""

from __future__ import annotations

import pytest

from awa_django.exceptions import InvalidJobError
from awa_django.models import Job
from awa_django.workflows import Workflow
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def declared() -> tuple[Workflow, int, int, int]:
    wf = Workflow("extended")
    split = wf.add("wf.value", {"value": 1}, name="split")
    total = wf.add("wf.sum", name="total", after=[split])
    report = wf.add("wf.sum", name="report", after=[total])
    wf.enqueue()
    return wf, split.id, total.id, report.id


@pytest.mark.parametrize("which", ["direct", "through another job"])
def test_extending__a_new_step_after_a_job_that_waits_for_it_is_a_cycle(which: str) -> None:
    wf, split, total, report = declared()
    extension = Workflow.extending(split)
    target = total if which == "direct" else report
    extension.add("wf.value", name="late", after=[target])

    with pytest.raises(InvalidJobError, match=rf"step 'late' would wait for job {target}.*a cycle"):
        extension.enqueue()
    assert wf.id is not None
    assert Job.objects.filter(workflow_id=wf.id).count() == 3
    assert Job.objects.get(pk=total).pending == 1  # the join was rolled back with the rest


def test_extending__a_new_step_after_an_unrelated_existing_job_is_accepted() -> None:
    wf, split, total, _ = declared()
    outside = Job.objects.enqueue("wf.value", {"value": 2})
    extension = Workflow.extending(split)
    extension.add("wf.value", name="part", after=[outside.pk])
    extension.enqueue()

    assert wf.id is not None
    assert Job.objects.filter(workflow_id=wf.id).count() == 4
    assert Job.objects.get(pk=total).pending == 2  # split and the new part
