"""Chaos: workers SIGKILLed mid-run and PostgreSQL restarted under them; nothing is lost, nothing
stays stuck, and every job's final attempt ran to completion exactly once.

Builds on test_crash (one SIGKILL, one rescuer) and test_db_restart (one restart, one worker):
here two workers share the run, one is killed, replaced, the server restarts, the other is
killed and replaced, and the survivors finish. Like test_db_restart, it restarts a private
server of its own (tests/privateserver.py), never the one the other tests share, so it runs
beside them and on any DATABASE_URL.
"""

from __future__ import annotations

import random
import signal
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.harness import wait_until
from tests.privateserver import PrivateServer, completed_jobs, migrated_server, state_counts
from tests.worker.support import SpawnedWorker, Spawner

# Two waves: the first is under way when first is killed; the second is enqueued once third runs
# (see the test), and the restart and the last kill are counted from it.
FIRST_WAVE, SECOND_WAVE = 400, 800
JOBS = FIRST_WAVE + SECOND_WAVE
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


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with migrated_server("awa_chaos") as private:
        yield private


def _wait_running(server: PrivateServer, worker: SpawnedWorker) -> None:
    """Until the worker has written its first snapshot: past Django's start, its signal handlers
    installed and its pool open (a SIGTERM sooner would end the process before it could drain)."""
    pid = worker.process.pid
    wait_until(
        lambda: server.rows("SELECT 1 FROM awa_worker_instance WHERE pid = %s", [pid]),
        timeout=60,
        what=f"worker pid {pid} to write its first snapshot",
    )


def _kill(worker: SpawnedWorker) -> None:
    worker.signal(signal.SIGKILL)
    worker.wait_exit()


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("scope", ["process", "cluster"])
def test_chaos__workers_killed_and_database_restarted__every_job_completes_once_none_stuck(
    server: PrivateServer, spawn_private: Spawner, scope: str
) -> None:
    # In cluster scope the workers share one global maximum through the leader's caps, which
    # must survive the kills (the leader among them) and the restart as well.
    args = (*WORKER_ARGS, "--capacity-scope", scope, "--global-max-workers", "16")
    rng = random.Random(1200)

    def wave(size: int) -> None:
        server.enqueue_many(
            [
                {"kind": "record", "queue": "chaos", "args": {"seconds": round(rng.uniform(0.02, 0.1), 3)}}
                for _ in range(size)
            ]
        )

    wave(FIRST_WAVE)
    first, second = spawn_private(*args, name="first"), spawn_private(*args, name="second")

    wait_until(lambda: completed_jobs(server) >= 150, timeout=60, what="150 completed jobs")
    _kill(first)
    third = spawn_private(*args, name="third")
    # The restart meets third running, not starting up (a worker started while its server is down
    # is tests/worker/test_startup.py's case): it must reconnect by itself.
    _wait_running(server, third)
    # Only now the second wave. A worker's start takes seconds, and second alone may drain any
    # backlog meanwhile (the jobs are short); counted from a wave enqueued after the start, the
    # restart and the last kill land mid-run however fast the machine runs the jobs.
    wave(SECOND_WAVE)

    target = FIRST_WAVE + 250
    wait_until(lambda: completed_jobs(server) >= target, timeout=60, what=f"{target} completed jobs")
    server.restart()  # every session dropped, the workers' among them; checked to be a new postmaster

    target = FIRST_WAVE + 500
    wait_until(lambda: completed_jobs(server) >= target, timeout=60, what=f"{target} completed jobs")
    _kill(second)
    assert completed_jobs(server) < JOBS, "every job completed before the last kill: the run was too short"
    fourth = spawn_private(*args, name="fourth")
    _wait_running(server, fourth)

    wait_until(lambda: completed_jobs(server) == JOBS, timeout=120, what=f"{JOBS} completed jobs")
    for survivor in (third, fourth):
        survivor.assert_alive()  # third reconnected by itself through the restart; nobody restarted it
        survivor.signal(signal.SIGTERM)
    for survivor in (third, fourth):
        assert survivor.wait_exit() == 0, survivor.log[-4000:]

    assert state_counts(server) == {"completed": JOBS}  # nothing lost, nothing left running
    # Every job's final attempt ran once, to its end (the handler's own rows say so).
    finished = Counter(server.rows("SELECT job_id, run_lease FROM demo_execution WHERE finished_at IS NOT NULL"))
    final = dict(server.rows("SELECT id, run_lease FROM awa_job_all"))
    assert {pk: finished[(pk, lease)] for pk, lease in final.items() if finished[(pk, lease)] != 1} == {}
    # Attempts were spent only on the kills and the restart, never in a loop.
    attempts = Counter(attempt for (attempt,) in server.rows("SELECT attempt FROM awa_job_all"))
    assert set(attempts) <= {1, 2, 3}, attempts
    assert attempts[1] < JOBS, "no job needed a second attempt: neither a kill nor the restart interrupted any"
