"""A database restart mid-run: the worker reconnects by itself and every job still completes.

Restarts the shared embedded server (other test runs on it see a second's disruption; the test
restarts it once and always leaves it running). Skipped when DATABASE_URL points elsewhere.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.db.utils import DatabaseError, InterfaceError, OperationalError

from awa_django.models import Job
from testproject.embedded import DATA_DIR
from tests.harness import wait_until
from tests.skiprule import missing_dependency
from tests.worker.support import Spawner, state_counts

JOBS = 2000
WORKER_ARGS = ("-q", "restart", "--poll-interval", "0.5", "--heartbeat-interval", "1", "--heartbeat-staleness", "5")
# The server runs as this OS user (pgserver starts it so when run as root).
PG_USER = "pgserver"


def _pg_ctl() -> Path:
    import pgserver

    return Path(pgserver.__file__).resolve().parent / "pginstall" / "bin" / "pg_ctl"


def _run_pg_ctl(*args: str) -> subprocess.CompletedProcess[str]:
    """pg_ctl on the embedded data directory, as the server's user. Output goes to files: a
    restarted postmaster inherits pg_ctl's stdout, so a pipe would never reach end-of-file."""
    command = shlex.join([str(_pg_ctl()), "-D", str(DATA_DIR), *args])
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(  # the caller checks the code
            ["su", PG_USER, "-s", "/bin/sh", "-c", command],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        out.seek(0)
        return subprocess.CompletedProcess(result.args, result.returncode, out.read())


def _restart_server() -> None:
    # Without -o, `restart` starts the server with the options of its previous run (postmaster.opts),
    # so the socket directory and listen settings stay exactly as pgserver chose them.
    result = _run_pg_ctl("-w", "-t", "120", "-l", str(DATA_DIR / "log"), "restart", "-m", "fast")
    assert result.returncode == 0, result.stdout


def _ensure_server_running() -> None:
    if _run_pg_ctl("status").returncode == 0:
        return
    opts = shlex.join(["-h", "", "-k", str(DATA_DIR)])
    result = _run_pg_ctl("-w", "-t", "120", "-l", str(DATA_DIR / "log"), "-o", opts, "start")
    assert result.returncode == 0, result.stdout


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
