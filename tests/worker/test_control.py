"""Operators' requests to a real ``awa_worker`` process, through the database: drain and stop
(SIGTERM's path: exit 0, nothing lost), hold a queue (no attempt of it starts after the
acknowledgement the worker writes), resume it (it runs again), and in weighted mode a held
queue's floor goes back to the pool. Every fact is read from the database."""

from __future__ import annotations

import signal
from datetime import datetime

import pytest

from awa_django.models import Job, Queue, WorkerInstance, WorkerRequest
from awa_django.services.control import request_drain, request_hold, request_resume
from awa_django.snapshot import WorkerFlags, queues_from_json
from tests.harness import wait_until
from tests.worker.support import Spawner, state_counts


def _sleeps(queue: str, count: int, seconds: float) -> None:
    Job.objects.enqueue_many([{"kind": "sleep", "queue": queue, "args": {"seconds": seconds}} for _ in range(count)])


def _worker_row() -> WorkerInstance:
    found: WorkerInstance = wait_until(WorkerInstance.objects.first, timeout=60, what="the worker's snapshot row")
    return found


def _acknowledged(request: WorkerRequest) -> WorkerRequest:
    def check() -> WorkerRequest | None:
        request.refresh_from_db()
        return request if request.acknowledged_at is not None else None

    found: WorkerRequest = wait_until(check, timeout=30, what=f"request #{request.pk} acknowledged")
    return found


def _flags() -> WorkerFlags | None:
    row = WorkerInstance.objects.first()
    return WorkerFlags.from_json(row.flags) if row is not None else None


def _latest_attempt(queue: str) -> datetime | None:
    return (
        Job.objects.filter(queue=queue)
        .exclude(attempted_at=None)
        .order_by("-attempted_at")
        .values_list("attempted_at", flat=True)
        .first()
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_drain_request__worker_stops_as_on_sigterm_exits_0_and_loses_nothing(spawn: Spawner) -> None:
    Queue.objects.create(name="drained", max_workers=2)
    _sleeps("drained", 5, 1.5)
    worker = spawn("-q", "drained", "--shutdown-timeout", "10", "--poll-interval", "0.5", name="drained")
    wait_until(lambda: Job.objects.running().count() == 2, timeout=60, what="2 running jobs")

    request = request_drain(_worker_row(), requested_by="operator-ann")

    assert worker.wait_exit() == 0, worker.log[-4000:]
    request.refresh_from_db()
    assert request.acknowledged_at is not None
    assert request.answer.startswith("draining"), request.answer
    assert f"operator request id={request.pk} action=drain queue=- requested_by=operator-ann" in worker.log
    assert "stopping: no new claims" in worker.log
    counts = state_counts()
    assert "running" not in counts, counts
    assert counts.get("completed", 0) >= 2
    assert counts.get("completed", 0) + counts.get("available", 0) == 5, counts
    assert list(Job.objects.exclude(errors=[]).values_list("errors", flat=True)) == []
    assert not WorkerInstance.objects.exists()  # a graceful stop removes its own snapshot


MODES_AND_SCOPES = {
    "hard_reserved-process": [],
    "weighted-process": ["--global-max-workers", "4"],
    "hard_reserved-cluster": ["--capacity-scope", "cluster", "--heartbeat-interval", "0.5"],
    "weighted-cluster": ["--capacity-scope", "cluster", "--global-max-workers", "4", "--heartbeat-interval", "0.5"],
}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", list(MODES_AND_SCOPES))
def test_hold_request__no_attempt_of_the_queue_starts_after_the_ack__resume_runs_it_again(
    spawn: Spawner, mode: str
) -> None:
    Queue.objects.create(name="held", max_workers=1, min_workers=1)
    Queue.objects.create(name="beside", max_workers=2)
    _sleeps("held", 200, 0.05)
    worker = spawn(
        "-q", "held", "-q", "beside", "--shutdown-timeout", "5", "--poll-interval", "0.5", *MODES_AND_SCOPES[mode],
        name="hold",
    )  # fmt: skip
    wait_until(lambda: Job.objects.filter(queue="held", state="completed").count() >= 3, timeout=60, what="3 done")

    hold = _acknowledged(request_hold(_worker_row(), "held", requested_by="operator-bo"))
    assert hold.acknowledged_at is not None
    wait_until(lambda: (f := _flags()) is not None and f.held_queues == ("held",), timeout=30, what="held flag")
    row = _worker_row()
    assert queues_from_json(row.queues)["held"].paused
    # The worker goes on claiming its other queue: those attempts, all after the ack, are the
    # proof that time passed with the worker live, and the held queue saw none meanwhile.
    _sleeps("beside", 6, 0.05)
    wait_until(lambda: Job.objects.filter(queue="beside", state="completed").count() == 6, timeout=60, what="beside")
    beside_first = Job.objects.filter(queue="beside").order_by("attempted_at").values_list("attempted_at", flat=True)
    assert beside_first[0] is not None and beside_first[0] > hold.acknowledged_at
    latest = _latest_attempt("held")
    assert latest is not None and latest <= hold.acknowledged_at, (latest, hold.acknowledged_at)
    assert Job.objects.filter(queue="held", state="running").count() == 0
    assert Job.objects.filter(queue="held", state="available").exists()
    assert "action=hold queue=held requested_by=operator-bo: holding queue 'held'" in worker.log

    resumed_at = _acknowledged(request_resume(_worker_row(), "held", requested_by="operator-bo")).acknowledged_at
    assert resumed_at is not None
    wait_until(
        lambda: (t := _latest_attempt("held")) is not None and t > resumed_at,
        timeout=30,
        what="an attempt of the held queue after the resume",
    )
    wait_until(lambda: (f := _flags()) is not None and f.held_queues == (), timeout=30, what="no held flag")
    worker.assert_alive()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hold_request__weighted_mode__the_held_queue_s_floor_goes_back_to_the_pool(spawn: Spawner) -> None:
    Queue.objects.create(name="floored", min_workers=2)
    Queue.objects.create(name="greedy", min_workers=0)
    _sleeps("greedy", 6, 300)
    worker = spawn(
        "-q", "floored", "-q", "greedy", "--global-max-workers", "4", "--shutdown-timeout", "1",
        "--poll-interval", "0.5", name="weighted",
    )  # fmt: skip
    # floored's two guaranteed slots stay free for it: greedy gets the pool of 4 - 2.
    wait_until(lambda: Job.objects.filter(queue="greedy", state="running").count() == 2, timeout=60, what="2 running")

    _acknowledged(request_hold(_worker_row(), "floored", requested_by="operator-cy"))

    wait_until(lambda: Job.objects.filter(queue="greedy", state="running").count() == 4, timeout=30, what="4 running")
    assert Job.objects.filter(state="running").count() == 4  # never past the global maximum
    snapshot = wait_until(
        lambda: (q := queues_from_json(_worker_row().queues)["floored"]).paused and q, timeout=30, what="snapshot"
    )
    assert getattr(snapshot.capacity, "min_workers", None) == 0
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(timeout=120) == 0, worker.log[-4000:]
    assert set(state_counts()) <= {"available", "retryable"}  # handed back at shutdown, none lost
