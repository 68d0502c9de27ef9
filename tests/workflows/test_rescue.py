"""A rescued upstream releases its dependents exactly once: the late write of the attempt the
rescue took away matches nothing (run_lease) and so releases nothing; the next attempt's does.
And end to end: a worker process dies inside a workflow step, another rescues and finishes it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.functions import Now

from awa_django.context import COMPLETED
from awa_django.inline.attempt import claim, write_outcome
from awa_django.models import Job
from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.workflows import Workflow
from testproject.demo.models import Execution
from tests.harness import wait_until
from tests.worker.support import Spawner
from tests.workflows import jobs  # noqa: F401 - registers the wf.* handlers


def _rescue(job_id: int) -> list[tuple[int, str]]:
    Job.objects.filter(pk=job_id).update(heartbeat_at=Now() - timedelta(hours=1))
    with connection.cursor() as cursor:
        cursor.execute(statements["rescue_stale_jobs"], {"staleness": timedelta(minutes=1), "limit": 10})  # type: ignore[dict-item]
        return [r[:2] for r in cursor.fetchall()]


@pytest.mark.django_db
def test_rescue__the_rescued_attempts_late_write_releases_nothing_the_next_releases_once() -> None:
    wf = Workflow("rescued")
    up = wf.add("wf.value", name="up")
    down = wf.add("wf.value", name="down", after=[up])
    wf.enqueue()
    [first] = claim("default", now=Job.objects.get(pk=up.id).run_at, limit=1, ids=[up.id])

    assert _rescue(up.id) == [(up.id, JobState.RETRYABLE)]
    assert write_outcome("default", first, COMPLETED, None) is False  # the old attempt's late write
    assert (Job.objects.get(pk=down.id).state, Job.objects.get(pk=down.id).pending) == ("waiting", 1)

    Job.objects.filter(pk=up.id).update(run_at=Now())
    [second] = claim("default", now=Job.objects.get(pk=up.id).run_at + timedelta(seconds=1), limit=1, ids=[up.id])
    assert write_outcome("default", second, COMPLETED, None) is True
    assert (Job.objects.get(pk=down.id).state, Job.objects.get(pk=down.id).pending) == ("available", 0)
    assert write_outcome("default", second, COMPLETED, None) is False  # written once only
    assert Job.objects.get(pk=down.id).pending == 0


@pytest.mark.django_db
def test_rescue__a_last_attempt_rescued_to_failed_cancels_its_dependents() -> None:
    wf = Workflow("rescued-failed")
    up = wf.add("wf.value", name="up", max_attempts=1)
    down = wf.add("wf.value", name="down", after=[up])
    wf.enqueue()
    claim("default", now=Job.objects.get(pk=up.id).run_at, limit=1, ids=[up.id])

    assert _rescue(up.id) == [(up.id, JobState.FAILED)]

    dependent = Job.objects.get(pk=down.id)
    assert dependent.state == "cancelled"
    assert f"upstream job {up.id} (up) ended failed" in dependent.errors[-1]["error"]


WORKER_ARGS = ("-q", "wf_crash", "--heartbeat-interval", "0.5", "--heartbeat-staleness", "3")


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_crash__a_worker_dies_in_a_step__another_rescues_it_and_the_graph_finishes_once(spawn: Spawner) -> None:
    wf = Workflow("crash")
    crash = wf.add("demo_wf_node", {"value": 0, "outcome": "crash"}, queue="wf_crash", name="crash")
    middle = [wf.add("demo_wf_node", {"value": i}, queue="wf_crash", after=[crash]) for i in (1, 2)]
    last = wf.add("demo_wf_node", {"value": 3}, queue="wf_crash", after=middle)
    wf.enqueue()
    workers = [spawn(*WORKER_ARGS, name="crash-worker") for _ in range(2)]

    ids = [s.id for s in wf.steps]
    wait_until(
        lambda: Job.objects.filter(pk__in=ids, state=JobState.COMPLETED).count() == len(ids),
        timeout=90,
        what="every step completed after the rescue",
    )

    assert sum(w.process.poll() is not None for w in workers) == 1  # the step killed one of them
    assert Job.objects.get(pk=crash.id).attempt == 2
    assert Execution.objects.filter(job_id=crash.id).count() == 2
    for s in [*middle, last]:
        assert Execution.objects.filter(job_id=s.id).count() == 1
        assert Job.objects.get(pk=s.id).pending == 0
    result = Job.objects.get(pk=last.id).result
    assert result is not None
    assert result["seen"] == {str(m.id): v for m, v in zip(middle, (1, 2), strict=True)}
