"""Atomic handlers behind PgBouncer in transaction mode: the whole attempt (the handler's writes,
its completion, the COMMIT) is one transaction, so one server connection, and exactly-once holds
through a SIGKILL of the worker as it does on a direct connection (tests/worker/test_atomic_chaos)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from django.db import connection

from awa_django.models import Job
from tests.pooler.conftest import PoolerSpawner
from tests.pooler.pgbouncer import PgBouncer
from tests.pooler.test_pgbouncer import WORKER_ARGS, assert_clean, wait_showing
from tests.worker.support import SpawnedWorker, state_counts

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QUEUE = "pooled_atomic"
JOBS = 400


@pytest.fixture
def counter() -> Iterator[None]:
    """demo_counter (count_atomic's table, which no migration creates) with its one row at 0."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE demo_counter (id int PRIMARY KEY, n bigint NOT NULL)")
        cursor.execute("INSERT INTO demo_counter VALUES (1, 0)")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE demo_counter")


def _counter() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM demo_counter WHERE id = 1")
        row = cursor.fetchone()
    assert row is not None, "demo_counter has no row 1"
    return int(row[0])


def _running_on(worker: SpawnedWorker) -> bool:
    return Job.objects.filter(state="running", attempted_by__endswith=f":{worker.process.pid}").exists()


def test_atomic__behind_pgbouncer__killed_worker__counter_equals_completed(
    spawn_pooled: PoolerSpawner, bouncer: PgBouncer, counter: None
) -> None:
    Job.objects.enqueue_many([{"kind": "count_atomic", "queue": QUEUE, "args": {"ms": 10}} for _ in range(JOBS)])
    doomed = spawn_pooled("-q", QUEUE, *WORKER_ARGS, name="doomed")
    wait_showing([doomed], lambda: _running_on(doomed), timeout=60, what="the first worker to run jobs")
    wait_showing([doomed], lambda: _counter() >= 50, timeout=60, what="50 increments committed")
    doomed.signal(signal.SIGKILL)
    doomed.wait_exit()
    assert Job.objects.filter(queue=QUEUE, state="completed").count() < JOBS, "the run was over before the kill"
    rescuer = spawn_pooled("-q", QUEUE, *WORKER_ARGS, name="rescuer")
    wait_showing(
        [rescuer],
        lambda: Job.objects.filter(queue=QUEUE, state="completed").count() == JOBS,
        timeout=180,
        what=f"{JOBS} completed jobs",
    )
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait_exit() == 0, rescuer.log[-4000:]

    assert state_counts() == {"completed": JOBS}
    assert Job.objects.filter(queue=QUEUE, attempt__gt=1).exists(), "the kill interrupted no attempt"
    assert _counter() == JOBS
    assert_clean(rescuer.log, bouncer.log)
