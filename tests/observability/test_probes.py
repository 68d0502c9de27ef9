"""The probes: ``/healthz`` (the loop turns) and ``/readyz`` (started, not draining, database
answering, migrations applied), on a real ``awa_worker`` subprocess's ports and, for the cases a
subprocess cannot show cheaply (a stuck loop, an unreachable database), on the parts themselves
with a real event loop, a real HTTP server and a real connection pool."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from psycopg_pool import AsyncConnectionPool

from awa_django.models import Job, Queue
from awa_django.observability.endpoints import EndpointServer
from awa_django.observability.probes import (
    CHECK_STALE,
    LIVENESS_TIMEOUT,
    Check,
    Probes,
    expected_migrations,
)
from awa_django.snapshot import WorkerFlags
from awa_django.worker.db import make_pool
from tests.harness import wait_until
from tests.worker.support import Spawner


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(port: int, path: str) -> tuple[int, str] | None:
    """(status, body) of GET http://127.0.0.1:port/path, None while nothing listens there."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None


def answers(port: int, path: str, status: int) -> Any:
    """A predicate: the path answers ``status``; its JSON body (or text) when it does."""

    def check() -> Any:
        got = get(port, path)
        if got is None or got[0] != status:
            return None
        try:
            return json.loads(got[1])
        except ValueError:
            return got[1]

    return check


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def flags(*, stopping: bool = False, listening: bool = True) -> WorkerFlags:
    return WorkerFlags(
        listening=listening, leader=False, stopping=stopping, in_flight=0, sync_running=0, capacity_scope="process"
    )


class Host:
    """What the probes read of a worker (ProbeHost), around a real connection pool."""

    def __init__(self, pool: AsyncConnectionPool, *, started: bool = True) -> None:
        self.ready = asyncio.Event()
        if started:
            self.ready.set()
        self.stopping = False
        self.pool = pool

    def flags(self) -> WorkerFlags:
        return flags(stopping=self.stopping)


# --- the answers, from the facts ---------------------------------------------------------


def test_liveness__starting_then_ok_then_stuck_when_the_loop_stops_stamping() -> None:
    clock = FakeClock()
    probes = Probes(frozenset({"0001_initial"}), clock=clock)
    assert probes.liveness().status == 200 and probes.liveness().body["status"] == "starting"
    probes.ticked_at = clock.now
    clock.now += LIVENESS_TIMEOUT
    assert probes.liveness().status == 200
    clock.now += 0.5
    stuck = probes.liveness()
    assert stuck.status == 503 and stuck.body["status"] == "stuck"


@pytest.mark.parametrize(
    ("check", "problem"),
    [
        (Check(at=1000.0, started=False, stopping=False, listening=False), "has not started"),
        (Check(at=1000.0, started=True, stopping=True, listening=True), "draining"),
        (
            Check(at=1000.0, started=True, stopping=False, listening=True, database_error="connection refused"),
            "the database does not answer: connection refused",
        ),
        (
            Check(at=1000.0, started=True, stopping=False, listening=True, missing_migrations=("0042_next",)),
            "migrations not applied: 0042_next (run python manage.py migrate)",
        ),
        (Check(at=1000.0 - CHECK_STALE - 1, started=True, stopping=False, listening=True), "stopped checking"),
    ],
    ids=["not-started", "draining", "database", "migrations", "stale"],
)
def test_readiness__each_failed_fact_is_503_naming_it(check: Check, problem: str) -> None:
    probes = Probes(frozenset(), clock=FakeClock())
    probes.check = check
    answer = probes.readiness()
    assert answer.status == 503
    assert any(problem in text for text in answer.body["problems"]), answer.body


@pytest.mark.parametrize(("listening", "wakeups"), [(True, "listen"), (False, "poll")])
def test_readiness__ready_listening_or_polling(listening: bool, wakeups: str) -> None:
    probes = Probes(frozenset(), clock=FakeClock())
    assert probes.readiness().status == 503  # nothing checked yet
    probes.check = Check(at=1000.0, started=True, stopping=False, listening=listening)
    answer = probes.readiness()
    assert (answer.status, answer.body["status"], answer.body["wakeups"]) == (200, "ok", wakeups)
    assert "problems" not in answer.body


def test_expected_migrations__the_awa_apps_leaf_from_disk() -> None:
    from django.db.migrations.loader import MigrationLoader

    expected = expected_migrations()
    disk = {name for app, name in MigrationLoader(None, ignore_no_migrations=True).disk_migrations if app == "awa"}
    assert len(expected) == 1 and expected <= disk
    assert max(disk) in expected


# --- the facts, from a real pool -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_inspect__applied_migrations_and_a_missing_one_on_the_real_database() -> None:
    async def inspect(expected: frozenset[str]) -> Check:
        pool = make_pool("default", 1)
        await pool.open(wait=True, timeout=10)
        try:
            return await Probes(expected).inspect(Host(pool))
        finally:
            await pool.close()

    ready = asyncio.run(inspect(expected_migrations()))
    assert (ready.database_error, ready.missing_migrations) == (None, ())
    missing = asyncio.run(inspect(expected_migrations() | {"9999_not_written_yet"}))
    assert missing.missing_migrations == ("9999_not_written_yet",)


def test_inspect__an_unreachable_database_is_not_ready() -> None:
    """A pool to a port nothing listens on: the connection really fails (no mock)."""
    port = free_port()

    async def inspect() -> Check:
        pool = AsyncConnectionPool(
            kwargs={"host": "127.0.0.1", "port": port, "dbname": "none", "connect_timeout": 2},
            min_size=1,
            max_size=1,
            open=False,
            reconnect_timeout=3,
        )
        await pool.open(wait=False)
        try:
            return await Probes(frozenset({"0001_initial"})).inspect(Host(pool))
        finally:
            await pool.close()

    check = asyncio.run(inspect())
    assert check.database_error is not None
    probes = Probes(frozenset())
    probes.check = check
    answer = probes.readiness()
    assert answer.status == 503
    assert any("the database does not answer" in text for text in answer.body["problems"])


# --- the HTTP side ---------------------------------------------------------------------------


@contextmanager
def serving(probes: Probes | None = None, metrics: Any = None) -> Iterator[int]:
    server = EndpointServer(0, "127.0.0.1", metrics=metrics)
    server.probes = probes
    try:
        yield server.port
    finally:
        server.close()


def test_endpoints__other_paths_are_404_naming_what_is_served() -> None:
    with serving(Probes(frozenset()), metrics=lambda accept: (b"m 1\n", "text/plain")) as port:
        assert get(port, "/metrics") == (200, "m 1\n")
        for path in ("/", "/health", "/healthz/x", "/metrics/"):
            status, body = get(port, path) or (0, "")
            assert status == 404 and "/metrics, /healthz, /readyz" in body
    with serving(None, metrics=lambda accept: (b"m 1\n", "text/plain")) as port:
        assert get(port, "/healthz") == (404, "not found: /healthz; this port serves /metrics\n")


def test_healthz__answers_503_from_its_own_thread_while_the_loop_is_stuck() -> None:
    clock = FakeClock()
    probes = Probes(frozenset(), clock=clock)
    loop = asyncio.new_event_loop()
    release = threading.Event()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    pool = AsyncConnectionPool(kwargs={}, min_size=1, open=False)  # never opened: the host has not started
    watcher = asyncio.run_coroutine_threadsafe(probes.run(Host(pool, started=False)), loop)
    try:
        with serving(probes) as port:
            wait_until(lambda: probes.ticked_at == clock.now, what="the first stamp")
            assert answers(port, "/healthz", 200)()["status"] == "ok"
            loop.call_soon_threadsafe(release.wait)  # blocks the loop: nothing stamps any more
            clock.now += LIVENESS_TIMEOUT + 1
            assert answers(port, "/healthz", 503)()["status"] == "stuck"
            assert answers(port, "/readyz", 503)()["problems"] == ["the worker has not started"]
            release.set()
            wait_until(answers(port, "/healthz", 200), what="the loop to stamp again")
    finally:
        release.set()
        watcher.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


# --- a real awa_worker -----------------------------------------------------------------------


@pytest.mark.slow
def test_worker__health_port_ready_then_draining_then_gone(spawn: Spawner) -> None:
    port = free_port()
    Queue.objects.create(name="probed", max_workers=1)
    worker = spawn("-q", "probed", "--health-port", str(port), "--shutdown-timeout", "30")
    ready = wait_until(answers(port, "/readyz", 200), timeout=60, what="the worker to be ready")
    assert ready["status"] == "ok" and ready["wakeups"] in ("listen", "poll")
    assert answers(port, "/healthz", 200)()["status"] == "ok"
    assert get(port, "/metrics") is not None and get(port, "/metrics")[0] == 404  # type: ignore[index]

    job = Job.objects.enqueue("sleep", {"seconds": 20}, queue="probed")
    wait_until(lambda: Job.objects.get(pk=job.pk).state == "running", timeout=30, what="the job to run")
    worker.signal(signal.SIGTERM)  # drains: the job still runs, nothing new is claimed
    draining = wait_until(answers(port, "/readyz", 503), timeout=30, what="readiness to fail while draining")
    assert any("draining" in problem for problem in draining["problems"]), draining
    assert answers(port, "/healthz", 200)()["status"] == "ok"  # alive: the loop still turns
    worker.signal(signal.SIGTERM)  # a second signal: stop now (the job is handed to the rescue)
    worker.wait_exit(30)
    assert get(port, "/healthz") is None  # the port is closed with the worker


@pytest.mark.slow
def test_worker__metrics_port_serves_the_probes_and_404_elsewhere(spawn: Spawner) -> None:
    pytest.importorskip("prometheus_client")
    port = free_port()
    Queue.objects.create(name="probed", max_workers=1)
    worker = spawn("-q", "probed", "--metrics-port", str(port), "--shutdown-timeout", "1")
    wait_until(answers(port, "/readyz", 200), timeout=60, what="the worker to be ready")
    assert answers(port, "/healthz", 200)()["status"] == "ok"
    metrics = answers(port, "/metrics", 200)()
    assert "awa_worker_up 1.0" in metrics
    for path in ("/", "/health", "/anything"):
        assert answers(port, path, 404)(), path
    worker.signal(signal.SIGTERM)
    assert worker.wait_exit(30) == 0, worker.log


@pytest.mark.django_db
def test_command__health_port_in_use_is_a_CommandError_naming_the_flag() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # the address the worker binds
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=rf"cannot serve probes on 0\.0\.0\.0:{port}: .*--health-port"):
            call_command("awa_worker", "--health-port", str(port))


def test_run__a_check_that_fails_itself_is_not_ready_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenHost(Host):
        def flags(self) -> WorkerFlags:
            raise RuntimeError("flags broke")

    async def one_round() -> Probes:
        probes = Probes(frozenset())
        pool = AsyncConnectionPool(kwargs={}, min_size=1, open=False)
        watcher = asyncio.create_task(probes.run(BrokenHost(pool)))
        await asyncio.sleep(0)  # the watcher's first round runs up to its first sleep
        watcher.cancel()
        return probes

    probes = asyncio.run(one_round())
    answer = probes.readiness()
    assert answer.status == 503
    assert any("the check itself failed: RuntimeError('flags broke')" in p for p in answer.body["problems"])
    assert probes.liveness().status == 200  # the loop still turned
    assert "readiness check failed" in caplog.text
