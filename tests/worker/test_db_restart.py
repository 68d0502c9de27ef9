"""A database restart mid-run: the worker reconnects by itself and every job still completes.

Restarts the shared embedded server (other test runs on it see a second's disruption; the test
restarts it once and always leaves it running). Skipped when DATABASE_URL points elsewhere.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.utils import DatabaseError, InterfaceError, OperationalError

from awa_django.models import Job
from testproject import embedded
from tests.harness import wait_until
from tests.skiprule import missing_dependency
from tests.worker.support import Spawner, state_counts

JOBS = 2000
WORKER_ARGS = ("-q", "restart", "--poll-interval", "0.5", "--heartbeat-interval", "1", "--heartbeat-staleness", "5")


def _restart_server() -> None:
    # Under the provider's lock: a worker that starts meanwhile waits for the restart to finish.
    embedded.restart()


def _ensure_server_running() -> None:
    embedded.socket_dir()


def _tolerant(predicate: Callable[[], Any]) -> Callable[[], Any]:
    """A predicate that reads through a database restart: a dropped connection means "not yet"."""

    def check() -> Any:
        try:
            return predicate()
        except (OperationalError, InterfaceError, DatabaseError, psycopg.Error):
            connection.close()  # the next query opens a fresh connection
            return False

    return check


@pytest.mark.slow
@pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason=missing_dependency("the embedded PostgreSQL (this test restarts it)", "unset DATABASE_URL"),
)
@pytest.mark.django_db(transaction=True)
def test_database_restart__worker_reconnects_by_itself_and_completes_every_job(spawn: Spawner) -> None:
    # 2000 jobs of 0.2 s at 50 at once: the drain takes at least 8 s, so the restart lands mid-run.
    Job.objects.enqueue_many([{"kind": "sleep", "queue": "restart", "args": {"seconds": 0.2}} for _ in range(JOBS)])
    worker = spawn(*WORKER_ARGS, name="restart")
    wait_until(lambda: Job.objects.completed().count() >= 200, timeout=120, what="200 completed jobs")

    try:
        _restart_server()
    finally:
        _ensure_server_running()
    connection.close()  # the restart dropped this session too
    assert Job.objects.completed().count() < JOBS, "every job completed before the restart: nothing was tested"

    wait_until(_tolerant(lambda: Job.objects.completed().count() == JOBS), timeout=300, what=f"{JOBS} completed jobs")
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
    assert state_counts() == {"completed": JOBS}
    # A claim committed just as the server went down reaches no worker; the rescue runs it again.
    assert set(Job.objects.values_list("attempt", flat=True)) <= {1, 2}
