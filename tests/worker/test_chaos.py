"""Chaos: workers SIGKILLed mid-run and PostgreSQL restarted under them; nothing is lost, nothing
stays stuck, and every job's final attempt ran to completion exactly once.

Builds on test_crash (one SIGKILL, one rescuer) and test_db_restart (one restart, one worker):
here two workers share the run, one is killed, replaced, the server restarts, the other is
killed and replaced, and the survivors finish. Restarts the embedded server, so it is skipped
when DATABASE_URL points elsewhere.
"""

from __future__ import annotations

import os
import random
import signal
from collections import Counter

import pytest
from django.db import connection

from awa_django.models import Job, WorkerInstance
from testproject.demo.models import Execution
from tests.harness import wait_until
from tests.skiprule import missing_dependency
from tests.worker.support import SpawnedWorker, Spawner, state_counts
from tests.worker.test_db_restart import _ensure_server_running, _restart_server, _tolerant

JOBS = 1200
WORKER_ARGS = (
    "-q",
    "chaos",
    "--heartbeat-interval",
    "0.5",
    "--heartbeat-staleness",
    "3",
    "--poll-interval",
    "0.5",
    "--shutdown-timeout",
    "5",
)


def _completed() -> int:
    return Job.objects.completed().count()


def _wait_running(worker: SpawnedWorker) -> None:
    """Until the worker has written its first snapshot: past Django's start, its signal handlers
    installed and its pool open (a SIGTERM sooner would end the process before it could drain)."""
    wait_until(
        _tolerant(lambda: WorkerInstance.objects.filter(pid=worker.process.pid).exists()),
        timeout=60,
        what=f"worker pid {worker.process.pid} to write its first snapshot",
    )


def _kill(worker: SpawnedWorker) -> None:
    worker.signal(signal.SIGKILL)
    worker.wait_exit()


@pytest.mark.slow
@pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason=missing_dependency("the embedded PostgreSQL (this test restarts it)", "unset DATABASE_URL"),
)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scope", ["process", "cluster"])
def test_chaos__workers_killed_and_database_restarted__every_job_completes_once_none_stuck(
    spawn: Spawner, scope: str
) -> None:
    # In cluster scope the workers share one global maximum through the leader's caps, which
    # must survive the kills (the leader among them) and the restart as well.
    args = (*WORKER_ARGS, "--capacity-scope", scope, "--global-max-workers", "16")
    rng = random.Random(1200)
    Job.objects.enqueue_many(
        [
            {"kind": "record", "queue": "chaos", "args": {"seconds": round(rng.uniform(0.02, 0.1), 3)}}
            for _ in range(JOBS)
        ]
    )
    first, second = spawn(*args, name="first"), spawn(*args, name="second")

    wait_until(lambda: _completed() >= 150, timeout=60, what="150 completed jobs")
    _kill(first)
    third = spawn(*args, name="third")
    # The restart meets third running, not starting up (a start during a restart is
    # tests/testproject/test_embedded.py's case): it must reconnect by itself.
    _wait_running(third)

    wait_until(lambda: _completed() >= 400, timeout=60, what="400 completed jobs")
    try:
        _restart_server()
    finally:
        _ensure_server_running()
    connection.close()  # the restart dropped this session too

    wait_until(_tolerant(lambda: _completed() >= 650), timeout=60, what="650 completed jobs")
    _kill(second)
    assert _completed() < JOBS, "every job completed before the last kill: the run was too short"
    fourth = spawn(*args, name="fourth")
    _wait_running(fourth)

    wait_until(_tolerant(lambda: _completed() == JOBS), timeout=120, what=f"{JOBS} completed jobs")
    for survivor in (third, fourth):
        survivor.assert_alive()  # each reconnected by itself through the restart
        survivor.signal(signal.SIGTERM)
    for survivor in (third, fourth):
        assert survivor.wait_exit() == 0, survivor.log[-4000:]

    assert state_counts() == {"completed": JOBS}  # nothing lost, nothing left running
    # Every job's final attempt ran once, to its end (the handler's own rows say so).
    finished = Counter(Execution.objects.filter(finished_at__isnull=False).values_list("job_id", "run_lease"))
    final = dict(Job.objects.values_list("pk", "run_lease"))
    assert {pk: finished[(pk, lease)] for pk, lease in final.items() if finished[(pk, lease)] != 1} == {}
    # Attempts were spent only on the kills and the restart, never in a loop.
    attempts = Counter(Job.objects.values_list("attempt", flat=True))
    assert set(attempts) <= {1, 2, 3}, attempts
    assert attempts[1] < JOBS, "no job needed a second attempt: neither a kill nor the restart interrupted any"
