"""A worker killed with SIGKILL loses nothing: another worker rescues what it left running."""

from __future__ import annotations

import random
import signal
from collections import Counter

import pytest

from awa_django.models import Job
from testproject.demo.models import Execution
from tests.harness import wait_until
from tests.worker.support import Spawner, backend_pids, other_backends, state_counts

JOBS = 500
WORKER_ARGS = ("-q", "crash", "--heartbeat-interval", "0.5", "--heartbeat-staleness", "3", "--poll-interval", "0.5")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_crash__sigkill_mid_run__new_worker_rescues_and_completes_every_job(spawn: Spawner) -> None:
    rng = random.Random(500)
    Job.objects.enqueue_many(
        [
            {"kind": "record", "queue": "crash", "args": {"seconds": round(rng.uniform(0.05, 0.2), 3)}}
            for _ in range(JOBS)
        ]
    )
    before = backend_pids()  # sessions that are not the worker's (a pooler's idle server connections)
    first = spawn(*WORKER_ARGS, name="doomed")

    def busy() -> bool:
        counts = state_counts()
        return counts.get("completed", 0) >= 20 and counts.get("running", 0) >= 1

    wait_until(busy, timeout=120, what="some jobs completed and some running")
    first.signal(signal.SIGKILL)
    first.wait_exit()
    # The dead worker's sessions end once Postgres notices; a statement it sent just before the kill
    # may still commit until then. After that the rows it left running are final.
    wait_until(lambda: other_backends(excluding=before) == 0, timeout=60, what="the killed worker's sessions to end")
    orphaned = set(Job.objects.running().values_list("id", flat=True))
    assert orphaned, "the kill left no job running: nothing to rescue"
    assert Job.objects.completed().count() < JOBS

    second = spawn(*WORKER_ARGS, name="rescuer")
    wait_until(lambda: Job.objects.completed().count() == JOBS, timeout=240, what=f"{JOBS} completed jobs")
    second.signal(signal.SIGTERM)
    assert second.wait_exit() == 0, second.log[-4000:]

    assert state_counts() == {"completed": JOBS}
    rescued = {job.pk: job for job in Job.objects.filter(pk__in=orphaned)}
    for job in rescued.values():
        assert (job.attempt, job.run_lease) == (2, 3), (job.pk, job.attempt, job.run_lease, job.errors)
        assert len(job.errors) == 1, job.errors
        assert "rescued" in job.errors[0]["error"]
        assert job.errors[0]["attempt"] == 1
    others = Job.objects.exclude(pk__in=orphaned)
    assert set(others.values_list("attempt", flat=True)) == {1}
    assert list(others.exclude(errors=[]).values_list("pk", "errors")) == []

    # Executions, from the handler's own rows: every job ran once in its final attempt, and a job
    # that was not orphaned ran exactly once in all.
    finished = Counter(Execution.objects.filter(finished_at__isnull=False).values_list("job_id", "run_lease"))
    final_lease = dict(Job.objects.values_list("pk", "run_lease"))
    assert {pk: finished[(pk, lease)] for pk, lease in final_lease.items() if finished[(pk, lease)] != 1} == {}
    started = Counter(Execution.objects.values_list("job_id", flat=True))
    assert {pk: n for pk, n in started.items() if pk not in orphaned and n != 1} == {}
    assert all(started[pk] <= 2 for pk in orphaned)
