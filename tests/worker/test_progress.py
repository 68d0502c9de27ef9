"""Progress reported by a handler reaches the row with the heartbeat, and stays with the final state;
a return value is stored as the job's result."""

from __future__ import annotations

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates


@pytest.mark.django_db(transaction=True)
def test_progress__written_by_heartbeat_while_running_and_kept_at_completion(gates: Gates) -> None:
    async def report(context: JobContext) -> dict[str, int]:
        context.set_progress({"step": 1, "of": 2})
        await gates.wait("halfway")
        context.set_progress({"step": 2, "of": 2})
        return {"rows": 42}

    registry = Registry()
    registry.register(JobHandler("report", report, queue="progress", takes_context=True))
    job = Job.objects.enqueue("report", queue="progress")

    with running_worker(make_config(["progress"], heartbeat_interval=0.2), registry=registry):
        wait_until(
            lambda: Job.objects.get(pk=job.pk).progress == {"step": 1, "of": 2},
            what="the first progress value written by a heartbeat while the job runs",
        )
        assert Job.objects.get(pk=job.pk).state == "running"
        gates.open("halfway")
        wait_until(lambda: Job.objects.get(pk=job.pk).state == "completed", what="the job to complete")

    done = Job.objects.get(pk=job.pk)
    assert done.progress == {"step": 2, "of": 2}
    assert done.result == {"rows": 42}


@pytest.mark.django_db(transaction=True)
def test_result__value_that_cannot_be_stored_fails_the_job_with_a_clear_error() -> None:
    async def returns_a_set() -> set[int]:
        return {1, 2}

    registry = Registry()
    registry.register(JobHandler("set", returns_a_set, queue="results"))
    job = Job.objects.enqueue("set", queue="results")

    with running_worker(make_config(["results"]), registry=registry):
        wait_until(lambda: Job.objects.get(pk=job.pk).state == "failed", what="the job to fail")

    error = Job.objects.get(pk=job.pk).errors[-1]["error"]
    assert "cannot be stored as JSON" in error and "set" in error
