"""A database restart mid-run: the worker reconnects by itself and every job still completes.

The restarted server is a private one (tests/privateserver.py), built for this test and holding
its jobs and its worker's sessions: the server the other tests share is never touched, so this
test runs beside them, and also when DATABASE_URL points elsewhere (it needs only the embedded
server's programs, which the test extras install).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.harness import wait_until
from tests.privateserver import PrivateServer, completed_jobs, migrated_server, state_counts
from tests.worker.support import Spawner

JOBS = 2000
WORKER_ARGS = ("-q", "restart", "--poll-interval", "0.5", "--heartbeat-interval", "1", "--heartbeat-staleness", "5")


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with migrated_server("awa_restart") as private:
        yield private


@pytest.mark.slow
@pytest.mark.subprocess
def test_database_restart__worker_reconnects_by_itself_and_completes_every_job(
    server: PrivateServer, spawn_private: Spawner
) -> None:
    # 2000 jobs of 0.2 s at 50 at once: the drain takes at least 8 s, so the restart lands mid-run.
    server.enqueue_many([{"kind": "sleep", "queue": "restart", "args": {"seconds": 0.2}} for _ in range(JOBS)])
    worker = spawn_private(*WORKER_ARGS, name="restart")
    wait_until(lambda: completed_jobs(server) >= 200, timeout=120, what="200 completed jobs")

    server.restart()  # every session dropped, the worker's among them; checked to be a new postmaster
    assert completed_jobs(server) < JOBS, "every job completed before the restart: nothing was tested"

    wait_until(lambda: completed_jobs(server) == JOBS, timeout=300, what=f"{JOBS} completed jobs")
    worker.assert_alive()  # it reconnected by itself: nobody restarted it
    log = worker.log
    retry_warnings = [
        line
        for line in log.splitlines()
        if "WARNING" in line and ("retrying" in line or "reconnecting" in line or "claim failed" in line)
    ]
    assert retry_warnings, log[-4000:]

    worker.signal(signal.SIGTERM)
    assert worker.wait_exit() == 0, worker.log[-4000:]
    assert state_counts(server) == {"completed": JOBS}
    # A claim committed just as the server went down reaches no worker; the rescue runs it again.
    attempts = {attempt for (attempt,) in server.rows("SELECT DISTINCT attempt FROM awa_job_all")}
    assert attempts <= {1, 2}, attempts
