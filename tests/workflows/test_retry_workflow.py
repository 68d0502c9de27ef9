"""retry_workflow under run_jobs: what it re-arms runs again in order, and nothing else runs early."""

from __future__ import annotations

import pytest

from awa_django.models import Job
from awa_django.testing import run_jobs
from awa_django.workflows import Workflow, always
from awa_django.workflows.services import retry_workflow
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers

pytestmark = pytest.mark.django_db


def test_retry_workflow__a_dependent_still_waiting_is_not_released_twice_by_a_retried_upstream() -> None:
    wf = Workflow("retry-waiting")
    bad = wf.add("wf.fail", name="bad")
    slow = wf.add("wf.value", {"value": 1}, name="slow", queue="later")
    final = wf.add("wf.value", {"value": 9}, name="final", after=[always(bad), slow])
    wf.enqueue()

    run_jobs(queue="default", raise_on_failure=False)  # bad fails; slow (another queue) has not run
    assert Job.objects.get(pk=bad.id).state == "failed"
    assert Job.objects.get(pk=final.id).pending == 1  # waits for slow alone

    assert retry_workflow(wf.id) == 1  # bad runs again
    run_jobs(queue="default", raise_on_failure=False)  # bad fails again

    # final still waits for slow, which has not run
    assert Job.objects.get(pk=slow.id).state == "available"
    assert Job.objects.get(pk=final.id).state == "waiting"
    assert Job.objects.get(pk=final.id).pending == 1

    run_jobs(raise_on_failure=False)  # slow runs, then final
    assert Job.objects.get(pk=final.id).state == "completed"
