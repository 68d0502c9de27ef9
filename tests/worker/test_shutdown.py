"""Stopping a worker: SIGTERM lets running jobs finish within the shutdown timeout and claims
nothing new; past the timeout, what still runs is handed back as retryable; a second signal
stops at once and leaves the rows to the rescue path."""

from __future__ import annotations

import signal
from collections.abc import Callable
from datetime import datetime

import pytest
from django.db.models.functions import Now

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.worker.support import Spawner, state_counts


def _beat_since(job_id: int, before: datetime) -> Callable[[], bool]:
    def beaten() -> bool:
        heartbeat_at = Job.objects.get(pk=job_id).heartbeat_at
        return heartbeat_at is not None and heartbeat_at > before

    return beaten


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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigterm__database_gone_mid_run__the_worker_stops_within_its_shutdown_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database goes away under a running worker, then SIGTERM: nothing can be written (the
    job's row stays running, for the rescue), but the stop still keeps to its budget, the shutdown
    timeout plus the bounded flush, so that an orchestrator's grace period is enough and no SIGKILL
    is needed."""
    import asyncio
    import socket
    import threading
    import time

    from django.db import connection

    from awa_django.worker import Worker, db
    from tests.harness import make_config

    with socket.socket() as probe:  # a port nothing listens on: every new connection is refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job = Job.objects.enqueue("sleep", {"seconds": 300}, queue="gone")
    worker = Worker(make_config(["gone"], shutdown_timeout=1.0))
    box: dict[str, BaseException] = {}

    def main() -> None:
        try:
            asyncio.run(worker.run())
        except BaseException as exc:  # reported below
            box["error"] = exc

    thread = threading.Thread(target=main, name="awa-test-gone", daemon=True)
    thread.start()
    try:
        wait_until(worker.ready.is_set, what="the worker started")
        wait_until(lambda: Job.objects.running().filter(pk=job.pk).exists(), what="the job running")
        real = db.connection_kwargs
        monkeypatch.setattr(db, "connection_kwargs", lambda alias: {**real(alias), "host": "127.0.0.1", "port": port})
        worker.runtime.pool.kwargs = {**db.connection_kwargs("default"), "host": "127.0.0.1", "port": port}
        with connection.cursor() as cursor:  # the worker's sessions end: the database is gone for it
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'awa_worker%%' AND datname = current_database()"
            )
        wait_until(lambda: not worker.listening, what="the worker to notice")
        started = time.monotonic()
        worker.request_stop_threadsafe()
        thread.join(300)
        took = time.monotonic() - started
    finally:
        if thread.is_alive():  # a second request: at once
            worker.request_stop_threadsafe()
            thread.join(30)
    assert not thread.is_alive()
    assert "error" not in box, box
    # shutdown timeout 1 s + hand-back grace 1.5 s + flush max(1, 5) s + close, with room for a slow machine
    assert took < 20, f"the stop took {took:.1f}s with the database gone"
    assert Job.objects.get(pk=job.pk).state == "running"  # nothing could be written: the rescue's


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_sigterm__a_job_running_through_the_drain_keeps_its_heartbeat(spawn: Spawner) -> None:
    """The heartbeat goes on while the worker drains: a drain longer than HEARTBEAT_STALENESS would
    otherwise let the leader rescue a job still running here, and another worker run it beside it."""
    (job_id,) = _enqueue_sleeps("beating", 1, 300)
    worker = spawn(
        "-q", "beating", "--shutdown-timeout", "600", "--heartbeat-interval", "0.5", "--poll-interval", "0.5"
    )
    wait_until(lambda: Job.objects.running().filter(pk=job_id).exists(), timeout=60, what="the job running")

    worker.signal(signal.SIGTERM)
    wait_until(lambda: "waiting for 1 in-flight job(s)" in worker.log, timeout=30, what="the drain")
    # Two beats after the drain began: the stop's own last beat, if any, is at most one of them.
    for beat in ("a beat during the drain", "another beat during the drain"):
        before = Job.objects.get(pk=job_id).heartbeat_at
        assert before is not None
        wait_until(_beat_since(job_id, before), timeout=30, what=beat)
    worker.assert_alive()

    worker.signal(signal.SIGTERM)  # the second signal: at once, the job left running for the rescue
    assert worker.wait_exit(timeout=30) == 1, worker.log[-4000:]
    assert Job.objects.get(pk=job_id).state == "running"
