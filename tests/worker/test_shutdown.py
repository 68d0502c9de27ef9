"""Stopping a worker: SIGTERM lets running jobs finish within the shutdown timeout and claims
nothing new; past the timeout, what still runs is handed back as retryable; a second signal
stops at once and leaves the rows to the rescue path."""

from __future__ import annotations

import signal

import pytest
from django.db.models.functions import Now

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.worker.support import Spawner, state_counts


def _enqueue_sleeps(queue: str, count: int, seconds: float) -> list[int]:
    Job.objects.enqueue_many([{"kind": "sleep", "queue": queue, "args": {"seconds": seconds}} for _ in range(count)])
    return list(Job.objects.filter(queue=queue).values_list("pk", flat=True))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigterm__running_jobs_finish_nothing_new_is_claimed_and_the_process_exits_0(spawn: Spawner) -> None:
    Queue.objects.create(name="graceful", max_workers=2)
    _enqueue_sleeps("graceful", 5, 1.5)
    worker = spawn("-q", "graceful", "--shutdown-timeout", "10", "--poll-interval", "0.5", name="graceful")
    wait_until(lambda: Job.objects.running().count() == 2, timeout=60, what="2 running jobs")
    wait_until(WorkerInstance.objects.exists, timeout=30, what="the worker's snapshot row")

    worker.signal(signal.SIGTERM)

    assert worker.wait_exit() == 0, worker.log[-4000:]
    assert "waiting for 2 in-flight job(s)" in worker.log, worker.log[-4000:]
    counts = state_counts()
    assert "running" not in counts
    assert counts.get("completed", 0) >= 2
    assert counts.get("completed", 0) + counts.get("available", 0) == 5, counts
    assert set(Job.objects.completed().values_list("attempt", flat=True)) == {1}
    assert list(Job.objects.completed().exclude(errors=[]).values_list("errors", flat=True)) == []
    assert set(Job.objects.available().values_list("attempt", flat=True)) <= {0}
    assert not WorkerInstance.objects.exists()  # a graceful stop removes its own snapshot


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigterm__jobs_outlasting_the_shutdown_timeout__handed_back_as_retryable(spawn: Spawner) -> None:
    ids = _enqueue_sleeps("stubborn", 2, 300)
    worker = spawn("-q", "stubborn", "--shutdown-timeout", "1", "--poll-interval", "0.5", name="stubborn")
    wait_until(lambda: Job.objects.running().count() == 2, timeout=60, what="2 running jobs")

    worker.signal(signal.SIGTERM)

    assert worker.wait_exit(timeout=120) == 0, worker.log[-4000:]
    assert "shutdown timeout" in worker.log
    for job in Job.objects.filter(pk__in=ids):
        assert job.state == "retryable", (job.state, job.errors)
        assert job.attempt == 1
        assert job.heartbeat_at is None
        assert job.finalized_at is None
        assert len(job.errors) == 1
        assert "shutdown timeout" in job.errors[0]["error"]
        assert job.errors[0]["attempt"] == 1
    assert Job.objects.filter(pk__in=ids, run_at__gt=Now()).count() == 0  # due at once, no backoff


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_second_sigterm__stops_at_once_leaving_running_rows_for_the_rescue(spawn: Spawner) -> None:
    ids = _enqueue_sleeps("impatient", 2, 300)
    worker = spawn("-q", "impatient", "--shutdown-timeout", "600", "--poll-interval", "0.5", name="impatient")
    wait_until(lambda: Job.objects.running().count() == 2, timeout=60, what="2 running jobs")

    worker.signal(signal.SIGTERM)
    wait_until(lambda: "stopping: no new claims" in worker.log, timeout=30, what="the first signal's log line")
    worker.signal(signal.SIGTERM)

    # Far below the 600 s shutdown timeout: the second signal did not wait for the jobs, and the
    # exit status says the stop was forced (issue 17: it was 0).
    assert worker.wait_exit(timeout=30) == 1, worker.log[-4000:]
    assert "second stop request" in worker.log
    assert "forced stop (a second SIGTERM/SIGINT)" in worker.log
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"running"}
