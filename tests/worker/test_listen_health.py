"""A half-open LISTEN connection is noticed: its backend stopped (SIGSTOP) answers nothing and
reports no error, so only the worker's self-NOTIFY round trip can tell. The snapshot's
``listening`` goes false, the worker reconnects, and NOTIFY wake-ups work again.

Needs the embedded server on this machine (the test signals a backend process; it runs as root,
the server as its own user).
"""

from __future__ import annotations

import os
import signal
from typing import Any

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from awa_django.models import Job, WorkerInstance
from tests.conftest import _DJANGO_ONLY
from tests.harness import wait_until
from tests.skiprule import missing_dependency
from tests.worker.support import Spawner, wait_for_row

QUEUE = "listen_health"


def _listen_pids() -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            ["awa_worker:listen"],
        )
        return {pid for (pid,) in cursor.fetchall()}


def _flags() -> dict[str, Any]:
    flags = WorkerInstance.objects.values_list("flags", flat=True).first()
    return flags or {}


def _allow_connections(allow: bool) -> None:
    """Let new sessions into the test database, or not (from another database: Postgres refuses
    this for the current one). Sessions already open stay."""
    params = {k: v for k, v in connection.get_connection_params().items() if k not in _DJANGO_ONLY}
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as admin:
        statement = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(connection.settings_dict["NAME"]), sql.Literal(allow)
        )
        admin.execute(statement)


@pytest.mark.slow
@pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")),
    reason=missing_dependency("the embedded PostgreSQL (this test signals its backend)", "unset DATABASE_URL"),
)
@pytest.mark.django_db(transaction=True)
def test_listen__backend_stopped__listening_false_then_reconnected_and_notify_wakes_again(spawn: Spawner) -> None:
    # A 60 s poll interval: a job runs promptly only if a NOTIFY woke the worker.
    worker = spawn("-q", QUEUE, "--poll-interval", "60", "--heartbeat-interval", "0.5", name="listen")
    wait_until(lambda: _flags().get("listening") is True, timeout=60, what="the worker listening")
    (stopped,) = wait_until(_listen_pids, timeout=30, what="the LISTEN backend")

    os.kill(stopped, signal.SIGSTOP)
    try:
        # No new connection for now, so the worker's state between losing and regaining LISTEN lasts
        # until the test has seen it (its pool's connections stay open; snapshots still get written).
        _allow_connections(False)
        try:
            wait_until(lambda: _flags().get("listening") is False, timeout=30, what="listening to go false")
        finally:
            _allow_connections(True)
        wait_until(
            lambda: _flags().get("listening") is True and _listen_pids() - {stopped},
            timeout=30,
            what="a new LISTEN connection",
        )
    finally:
        os.kill(stopped, signal.SIGCONT)

    job = Job.objects.enqueue("noop", {}, queue=QUEUE)
    wait_for_row(job.pk, timeout=20, state="completed")  # far below the 60 s poll interval
    worker.assert_alive()
    assert "LISTEN connection lost" in worker.log and "ListenerStalledError" in worker.log, worker.log[-4000:]
