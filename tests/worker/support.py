"""Helpers for end-to-end worker tests: worker subprocesses, gates that hold a handler until the
test opens them, and reads of job rows."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models.functions import Now

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.sql import statements
from awa_django.worker import JobContext, Worker
from tests.harness import spawn_worker, terminate, wait_until


@dataclass
class SpawnedWorker:
    """A ``manage.py awa_worker`` subprocess and the file its output goes to."""

    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig``; a SIGTERM waits for the worker's handler (see tests.harness.terminate)."""
        if sig == signal.SIGTERM:
            terminate(self.process)
        else:
            self.process.send_signal(sig)

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The exit code; fails the test (showing the log) if the process does not exit in time."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker did not exit within {timeout}s; log:\n{self.log[-4000:]}") from None

    def assert_alive(self) -> None:
        assert self.process.poll() is None, f"the worker exited ({self.process.returncode}); log:\n{self.log[-4000:]}"


@dataclass
class Spawner:
    """Starts ``manage.py awa_worker`` subprocesses, on the test database or, given ``env`` (such as
    a tests/privateserver.py server's ``env()``), wherever that environment points."""

    tmp_path: Path
    started: list[SpawnedWorker] = field(default_factory=list)
    env: dict[str, str] | None = None

    def __call__(self, *args: str, name: str = "worker") -> SpawnedWorker:
        log_path = self.tmp_path / f"{name}-{len(self.started)}.log"
        worker = SpawnedWorker(spawn_worker(*args, env=self.env, log=log_path), log_path)
        self.started.append(worker)
        return worker

    def reap(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.process.kill()
            worker.process.wait(30)


class Gates:
    """Gates by key, opened from the test thread, awaited by async handlers on a worker's loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._opened: set[Any] = set()
        self._waiters: dict[Any, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    async def wait(self, key: Any) -> None:
        event = asyncio.Event()
        with self._lock:
            if key in self._opened:
                return
            self._waiters.setdefault(key, []).append((asyncio.get_running_loop(), event))
        await event.wait()

    def open(self, key: Any) -> None:
        self.open_together((key,))

    def open_together(self, keys: Iterable[Any]) -> None:
        """Open these gates in one turn of each waiting loop: their handlers resume together, and
        their attempts' outcomes all reach the writer before it next runs (asyncio runs ready
        callbacks in order, so the writer, woken by the first outcome, runs after the last): they
        are written in one batch."""
        woken: dict[asyncio.AbstractEventLoop, list[asyncio.Event]] = {}
        with self._lock:
            for key in keys:
                self._opened.add(key)
                for loop, event in self._waiters.pop(key, []):
                    woken.setdefault(loop, []).append(event)
        for loop, events in woken.items():
            with contextlib.suppress(RuntimeError):  # that worker's loop has already ended
                loop.call_soon_threadsafe(_set_all, events)

    def open_all(self) -> None:
        with self._lock:
            keys = list(self._waiters)
        for key in keys:
            self.open(key)


def _set_all(events: list[asyncio.Event]) -> None:
    for event in events:
        event.set()


def gated_registry(gates: Gates, started: list[int], queue: str) -> Registry:
    """A registry whose one kind, ``gated`` (in ``queue``), notes its job's id in ``started`` and
    waits for the job's gate."""

    async def gated(context: JobContext) -> None:
        started.append(context.job.id)
        await gates.wait(context.job.id)

    registry = Registry()
    registry.register(JobHandler("gated", gated, queue=queue, takes_context=True))
    return registry


T = TypeVar("T")


def on_loop(worker: Worker, read: Callable[[], T], timeout: float = 30.0) -> T:
    """``read()`` called on the worker's event loop, between two of its steps. A test thread that
    reads the runtime's state directly can land inside a step: the runner that stands down marks
    itself not hungry, then clears its demand in the allocator, and a read in between saw both."""
    loop = worker.loop
    assert loop is not None, "the worker's loop is not running"
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def call() -> None:
        try:
            future.set_result(read())
        except BaseException as exc:  # re-raised in the test's thread
            future.set_exception(exc)

    loop.call_soon_threadsafe(call)
    return future.result(timeout)


def row(job_id: int) -> Job:
    return Job.objects.get(pk=job_id)


def row_when(job_id: int, **expected: Any) -> Callable[[], Job | None]:
    """A wait_until predicate: the job's row once every ``field=value`` holds, else None."""

    def check() -> Job | None:
        job = Job.objects.get(pk=job_id)
        return job if all(getattr(job, name) == value for name, value in expected.items()) else None

    return check


def wait_for_row(job_id: int, timeout: float = 30.0, **expected: Any) -> Job:
    found: Job = wait_until(row_when(job_id, **expected), timeout=timeout, what=f"job {job_id} with {expected}")
    return found


def bring_forward(job_id: int) -> None:
    """Make a scheduled/retryable job due now (the test does not sit out a backoff)."""
    updated = Job.objects.filter(pk=job_id, state__in=["scheduled", "retryable"]).update(run_at=Now())
    assert updated == 1, f"job {job_id} was not waiting: {row(job_id).state}"


def state_counts() -> dict[str, int]:
    from django.db.models import Count

    return {r["state"]: r["n"] for r in Job.objects.values("state").annotate(n=Count("id")).order_by()}


def backend_pids() -> set[int]:
    """Backend pids of the client sessions on the test database other than this one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return {int(pid) for (pid,) in cursor.fetchall()}


def other_backends(excluding: set[int] | frozenset[int] = frozenset()) -> int:
    """Client sessions on the test database other than this one (worker connections), leaving out
    the backends in ``excluding`` (sessions that were there before, such as a pooler's idle
    server connections kept from an earlier test)."""
    return len(backend_pids() - excluding)


def rescue_running() -> list[int]:
    """The maintenance leader's rescue, run now on every running job, as if each one's heartbeat had
    gone stale: their leases are bumped, so their workers' late writes miss the guard. The
    heartbeats are set a day back first, in the rescue's transaction (a worker's heartbeat waits for
    it, then misses its guard): the rescue spares a job within its own live worker's staleness."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET heartbeat_at = now() - interval '1 day' WHERE state = 'running'")
        cursor.execute(statements["rescue_stale_jobs"], {"staleness": "1 hour", "limit": 100})
        return [row[0] for row in cursor.fetchall()]
