"""A half-open LISTEN connection is noticed: its backend stopped (SIGSTOP) answers nothing and
reports no error, so only the worker's self-NOTIFY round trip can tell. The snapshot's
``listening`` goes false, the worker reconnects, and NOTIFY wake-ups work again.

The stopped backend belongs to a private server (tests/privateserver.py), built for this test:
while a backend of a cluster is stopped, DROP DATABASE of any database on that cluster waits for
it, and a stop that lands while it reads the notification queue stalls NOTIFY in every database
there, so on the server the other tests share it would hang them. Here it disturbs no one, and
the test runs on any DATABASE_URL (it needs only the embedded server's programs, which the test
extras install). The server runs as ourselves, or as the embedded provider's user when we are
root: either way this process may signal its backends.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg import sql

from tests.harness import wait_until
from tests.privateserver import PrivateServer, migrated_server, state_counts
from tests.worker.support import Spawner

QUEUE = "listen_health"


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with migrated_server("awa_listen_health") as private:
        yield private


def _listen_pids(server: PrivateServer) -> set[int]:
    """Backend pids of the worker's LISTEN sessions on the server's database."""
    rows = server.rows(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
        ["awa_worker:listen"],
    )
    return {int(pid) for (pid,) in rows}


def _flags(server: PrivateServer) -> dict[str, Any]:
    """The worker's snapshot flags ({} until it has written one)."""
    rows = server.rows("SELECT flags FROM awa_worker_instance")
    assert len(rows) <= 1, f"one worker runs, yet {len(rows)} snapshots: {rows}"
    return dict(rows[0][0] or {}) if rows else {}


def _allow_connections(server: PrivateServer, allow: bool) -> None:
    """Let new sessions into the server's database, or not (from another database: Postgres
    refuses this for the current one). Sessions already open stay, the test's own among them."""
    with server.connect("postgres") as admin:
        statement = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(server.name), sql.Literal(allow)
        )
        admin.execute(statement)


@pytest.mark.slow
@pytest.mark.subprocess
def test_listen__backend_stopped__listening_false_then_reconnected_and_notify_wakes_again(
    server: PrivateServer, spawn_private: Spawner
) -> None:
    # A poll interval far longer than the whole test (the job below is enqueued by a manage.py
    # process, whose start takes seconds): the job runs only if a NOTIFY woke the worker.
    worker = spawn_private("-q", QUEUE, "--poll-interval", "600", "--heartbeat-interval", "0.5", name="listen")
    wait_until(lambda: _flags(server).get("listening") is True, timeout=60, what="the worker listening")
    (stopped,) = wait_until(lambda: _listen_pids(server), timeout=30, what="the LISTEN backend")

    os.kill(stopped, signal.SIGSTOP)
    try:
        # No new connection for now, so the worker's state between losing and regaining LISTEN lasts
        # until the test has seen it (its pool's connections stay open; snapshots still get written).
        _allow_connections(server, False)
        try:
            wait_until(lambda: _flags(server).get("listening") is False, timeout=30, what="listening to go false")
        finally:
            _allow_connections(server, True)
        wait_until(
            lambda: _flags(server).get("listening") is True and _listen_pids(server) - {stopped},
            timeout=30,
            what="a new LISTEN connection",
        )
    finally:
        os.kill(stopped, signal.SIGCONT)

    server.enqueue_many([{"kind": "noop", "queue": QUEUE, "args": {}}])
    # Far below the poll interval: only the new LISTEN connection's wake-up runs it this soon.
    wait_until(lambda: state_counts(server) == {"completed": 1}, timeout=20, what="the job completed")
    worker.assert_alive()
    assert "LISTEN connection lost" in worker.log and "ListenerStalledError" in worker.log, worker.log[-4000:]
