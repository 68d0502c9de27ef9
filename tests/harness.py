"""Running real workers from tests: in-process (a thread with its own event loop) or as a
``manage.py awa_worker`` subprocess on the test database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection

from awa_django.observability.sink import MetricsSink
from awa_django.registry import Registry
from awa_django.worker import QueueConfig, Worker, WorkerConfig

ROOT = Path(__file__).resolve().parent.parent


def database_now() -> datetime:
    """The database's clock (``now()`` of a statement of its own on the test's connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        moment: datetime = cursor.fetchone()[0]
    return moment


def make_config(queues: dict[str, QueueConfig] | list[str], **overrides: Any) -> WorkerConfig:
    """A WorkerConfig with intervals short enough for tests (each still a real interval)."""
    if isinstance(queues, list):
        queues = {name: QueueConfig(name) for name in queues}
    values: dict[str, Any] = {
        "poll_interval": 0.2,
        "heartbeat_interval": 0.5,
        "heartbeat_staleness": 3.0,
        "shutdown_timeout": 5.0,
        "maintenance_interval": 0.1,
        "reconfigure_interval": 0.5,
        "database_alias": "default",
    }
    values.update(overrides)
    return WorkerConfig(queues=queues, **values)


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, what: str = "") -> Any:
    """Poll a condition until it holds; fail the test with ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


@contextmanager
def running_worker(
    config: WorkerConfig,
    registry: Registry | None = None,
    stop_timeout: float = 30.0,
    metrics: MetricsSink | None = None,
) -> Iterator[Worker]:
    """Run a Worker in a background thread; stop it gracefully on exit and re-raise its failure."""
    box: dict[str, Any] = {}
    started = threading.Event()

    def main() -> None:
        async def go() -> None:
            worker = Worker(config, registry=registry, metrics=metrics)
            box["worker"] = worker
            waiter = asyncio.create_task(worker.ready.wait())
            waiter.add_done_callback(lambda _: started.set())
            await worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:  # reported to the test below
            box["error"] = exc
        finally:
            started.set()

    thread = threading.Thread(target=main, name="awa-test-worker", daemon=True)
    thread.start()
    started.wait(30)
    if "error" in box:
        raise box["error"]
    worker: Worker = box["worker"]
    try:
        yield worker
    finally:
        worker.request_stop_threadsafe()
        thread.join(stop_timeout)
        if thread.is_alive():
            raise AssertionError(f"worker did not stop within {stop_timeout}s")
        if "error" in box:
            raise box["error"]


def worker_env(**extra: str) -> dict[str, str]:
    """Environment for a subprocess that must use this test run's database."""
    env = dict(os.environ)
    env["AWA_DB_NAME"] = connection.settings_dict["NAME"]
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def spawn_worker(*args: str, env: dict[str, str] | None = None, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``manage.py awa_worker ARGS`` on the test database; output goes to ``log``."""
    out = open(log, "wb") if log is not None else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", *args],
        cwd=ROOT,
        env=env or worker_env(),
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler of its own for ``sig`` (Linux: the SigCgt mask of
    /proc/PID/status). False once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def terminate(process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Send SIGTERM once the process handles it: a worker catches SIGTERM only after Django's
    start, and a SIGTERM before that ends it with -15, not with the clean stop a test asserts (a
    loaded machine can leave a worker spawned late in a test still starting when its jobs are done).
    A process that exits first is left to its exit code."""
    wait_until(
        lambda: process.poll() is not None or catches(process.pid, signal.SIGTERM),
        timeout=timeout,
        what=f"process {process.pid} to handle SIGTERM",
    )
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)


def fresh_job_table() -> None:
    """Empty awa_job into a new relation (TRUNCATE, undone with the test's transaction) before a plan
    test writes its rows: its statistics are then its own rows' alone. Rows that earlier tests in the
    same database rolled back stay behind as dead tuples and pages, and the planner prices a scan by
    pages: under xdist the tests before a plan test change from run to run, and a count planned on
    PostgreSQL 15 once took an index of other states."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE awa_job CASCADE")


def drop_range_partitions() -> None:
    """Drop every range partition of awa_job_done (finished rows go to the DEFAULT partitions until
    a leader creates them again). Range partitions outlive a test: earlier tests' leaders make them
    with the widths of their retentions, and a job is kept up to its retention plus the width of the
    partition it lands in, so a retention test starts with none."""
    from awa_django.sql import statements

    with connection.cursor() as cursor:
        cursor.execute(statements["list_job_partitions"])
        for _branch, name, _lower, _upper in cursor.fetchall():
            cursor.execute(f'DROP TABLE "{name}"')  # a partition's name, read from the catalog


def run_on_worker_connection(coroutine_function: Callable[..., Any], *args: Any) -> Any:
    """``coroutine_function(conn, *args)`` on a fresh worker-style async connection to the test
    database (``awa_django.worker.db.connect``), in an event loop of its own; closed after."""
    from awa_django.worker.db import connect

    async def main() -> Any:
        conn = await connect("default", purpose="test")
        try:
            return await coroutine_function(conn, *args)
        finally:
            await conn.close()

    return asyncio.run(main())
