"""A worker started while its database is unreachable waits for it (issue 12, item 4).

In an orchestrated deployment the worker's container and Postgres start together. The end-to-end
test builds a second, private PostgreSQL server (tests/privateserver.py: initdb from the embedded
server's binaries, a free TCP port; migrated, one job enqueued), stops it, starts
``manage.py awa_worker`` pointed at it, starts the server only once the worker has logged that it
has been waiting for at least 5 seconds, and then watches the job complete. No mocks: a real
server that is really down.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from awa_django.states import JobState
from tests.harness import ROOT, spawn_worker, wait_until
from tests.privateserver import PrivateServer, free_port, private_server
from tests.worker.support import SpawnedWorker

WAITED = re.compile(r"database unavailable at startup, retrying in [0-9.]+s .*waited=([0-9.]+)s")


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with private_server("awa_startup") as private:
        yield private


def _longest_wait(log: str) -> float:
    return max((float(m.group(1)) for m in WAITED.finditer(log)), default=0.0)


@pytest.mark.subprocess
def test_worker__started_5s_before_postgres_waits_and_then_serves_jobs(server: PrivateServer, tmp_path: Path) -> None:
    server.start()
    server.create_database()
    server.migrate()
    server.manage("shell", "-c", "from awa_django.models import Job; Job.objects.enqueue('noop', queue='boot')")
    server.stop()

    log = tmp_path / "worker.log"
    worker = SpawnedWorker(
        spawn_worker("-q", "boot", "--wait-for-database", "120", "--poll-interval", "0.2", env=server.env(), log=log),
        log,
    )
    try:
        wait_until(lambda: _longest_wait(worker.log) >= 5.0, timeout=60, what="the worker logging 5 s of waiting")
        worker.assert_alive()
        server.start()

        def completed() -> bool:
            return server.rows("SELECT state FROM awa_job_all WHERE kind = 'noop'") == [(JobState.COMPLETED.value,)]

        wait_until(completed, timeout=60, what="the job to complete once Postgres is up")
        assert "database reachable database=default what=reading the applied migrations" in worker.log
        worker.signal(signal.SIGTERM)
        assert worker.wait_exit() == 0, worker.log[-4000:]
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(30)


@pytest.mark.subprocess
def test_worker__unreachable_past_the_wait_exits_with_a_clear_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    env = {k: v for k, v in os.environ.items() if k not in ("AWA_DB_NAME", "AWA_TEST_DB")}
    env["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:{port}/nowhere"

    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", "boot", "--wait-for-database", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1, result.stderr
    assert "database unavailable at startup, retrying" in result.stderr  # a line per attempt
    assert len(WAITED.findall(result.stderr)) >= 2
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("CommandError: database 'default' ('nowhere' at 127.0.0.1:")
    assert "still unreachable after" in error
    assert "--wait-for-database SECONDS or AWA['DATABASE_WAIT_TIMEOUT'] (now 1s)" in error


@pytest.mark.parametrize("value", [-1, "60", float("nan"), float("inf"), True, None])
def test_worker__invalid_wait_setting_is_a_command_error_naming_it(value: object) -> None:
    with override_settings(AWA={"DATABASE_WAIT_TIMEOUT": value}), pytest.raises(CommandError) as caught:
        call_command("awa_worker", "-q", "boot")

    assert f"AWA['DATABASE_WAIT_TIMEOUT'] is {value!r}" in str(caught.value)
    assert "--wait-for-database SECONDS" in str(caught.value)


@pytest.mark.subprocess
@pytest.mark.parametrize("value", ["-1", "soon", "nan"])
def test_worker__invalid_wait_option_is_a_usage_error(value: str) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "--wait-for-database", value],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 2
    assert f"argument --wait-for-database: '{value}'" in result.stderr


def _refused_kwargs(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Point the worker's connections (worker/db.py) at a port nothing listens on; returns the real
    connection kwargs of the test database, to give back to the pool once the test wants it up."""
    import socket

    from awa_django.worker import db

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    real = db.connection_kwargs
    monkeypatch.setattr(db, "connection_kwargs", lambda alias: {**real(alias), "host": "127.0.0.1", "port": port})
    return real("default")


def _run_in_thread(worker: Any) -> tuple[threading.Thread, dict[str, BaseException]]:
    box: dict[str, BaseException] = {}

    def main() -> None:
        try:
            asyncio.run(worker.run())
        except BaseException as exc:  # reported to the test
            box["error"] = exc

    thread = threading.Thread(target=main, name="awa-test-unreachable", daemon=True)
    thread.start()
    wait_until(lambda: worker.loop is not None, what="the worker's loop")
    return thread, box


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker__database_unreachable_past_the_pool_s_opening_wait__serves_jobs_once_it_answers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The command found the database, then it went away (a restart, or every connection slot
    taken during a deploy) as the worker opened its pool. Before, the pool's opening timed out
    after 10 s, psycopg_pool closed the pool, and every retry after was PoolClosed: the worker
    logged "retrying" forever and never served a job, even once the database answered."""
    from awa_django.models import Job
    from awa_django.worker import Worker
    from tests.harness import make_config

    real = _refused_kwargs(monkeypatch)
    worker = Worker(make_config(["reopen"]))
    thread, box = _run_in_thread(worker)
    try:
        wait_until(
            lambda: any("PoolTimeout" in record.getMessage() for record in caplog.records),
            timeout=60,
            what="the pool's opening to time out once",
        )
        worker.runtime.pool.kwargs = real  # the database answers again
        wait_until(worker.ready.is_set, timeout=60, what="the worker to start serving")
        job = Job.objects.enqueue("noop", {}, queue="reopen")
        wait_until(
            lambda: Job.objects.filter(pk=job.pk, state="completed").exists(), timeout=30, what="the job to complete"
        )
    finally:
        worker.request_stop_threadsafe()
        thread.join(30)
        if thread.is_alive():
            worker.request_stop_threadsafe()  # a second request: at once
            thread.join(10)
    assert not thread.is_alive()
    assert "error" not in box, box


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_worker__stop_requested_while_the_database_is_unreachable_at_start__stops_without_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM while the worker waits for its database to open the pool: nothing is claimed yet, so
    the first signal stops it. Before, the startup retried its database forever whatever the stop:
    only a second signal (or the orchestrator's SIGKILL, after its grace period) ended it."""
    from awa_django.worker import Worker
    from tests.harness import make_config

    _refused_kwargs(monkeypatch)
    worker = Worker(make_config(["nowhere"]))
    thread, box = _run_in_thread(worker)
    wait_until(
        lambda: any("opening the connection pool" in record.getMessage() for record in caplog.records),
        timeout=60,
        what="the worker to wait for its database",
    )
    worker.request_stop_threadsafe()
    thread.join(20)
    stopped = not thread.is_alive()
    if not stopped:  # a second request ends it at once, so that the thread does not outlive the test
        worker.request_stop_threadsafe()
        thread.join(10)
    assert stopped, "the first stop request was ignored while the database was unreachable"
    assert "error" not in box, box
    assert not worker.ready.is_set()
    assert not worker.forced
