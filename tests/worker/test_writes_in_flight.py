"""A write held up in the database no longer holds up every other finished attempt: once the
write in flight has been out ``completer.STUCK_AFTER`` seconds, what ended meanwhile goes in a
second write, on another pooled connection (``completer.WRITES`` at most).

Here a test transaction holds the row lock of a running job, so the write of that job's outcome
waits on it (the database says so: the worker's session is among the lock's waiters); the
outcomes of two other jobs that end meanwhile are written by a second write while the first
still waits, as the rows show. Then the lock goes and the first job's write completes too. With
one write in flight at a time, the two waited for the lock (this test timed out there).

The property below does the same over random shapes: how many jobs, the order they end in, which
of them has its row held (ending first, last or between), and the mode. Each ends only once the
one before it is accounted for, so no two outcomes share a batch by chance: every job whose row is
not held is written while the held one waits, and once the lock goes every job is written exactly
once, on its first attempt.
"""

from __future__ import annotations

import functools
import uuid

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, gated_registry

QUEUE = "lanes"


def _blocked_by(holder: int) -> bool:
    """Whether a worker's session waits on a lock the backend ``holder`` holds: with no heartbeat
    due, only the write of the job's outcome touches its row."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'awa_worker%%' "
            "AND %s = ANY(pg_blocking_pids(pid))",
            [holder],
        )
        (count,) = cursor.fetchone()
    return bool(count)


def _states(ids: list[int]) -> dict[int, str]:
    return dict(Job.objects.filter(pk__in=ids).values_list("pk", "state"))


def _completed(job_id: int) -> bool:
    return _states([job_id]) == {job_id: "completed"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("global_max", [None, 4], ids=["hard_reserved", "weighted"])
def test_write_waiting_on_a_row_lock__other_outcomes_are_written_meanwhile(
    gates: Gates, global_max: int | None
) -> None:
    started: list[int] = []
    # No heartbeat due while the test looks (it would wait on the lock too, and the write behind it).
    config = make_config(
        {QUEUE: QueueConfig(QUEUE, max_workers=4)},
        global_max_workers=global_max,
        heartbeat_interval=60.0,
        heartbeat_staleness=600.0,
    )
    held, *others = [Job.objects.enqueue("gated", queue=QUEUE).pk for _ in range(3)]

    with running_worker(config, registry=gated_registry(gates, started, QUEUE)) as worker:
        wait_until(lambda: len(started) == 3, what="three gated jobs running")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM awa_job WHERE id = %s FOR UPDATE", [held])
                cursor.execute("SELECT pg_backend_pid()")
                (holder,) = cursor.fetchone()
            gates.open(held)
            wait_until(lambda: _blocked_by(holder), what="the held job's write waiting on the lock")
            for job_id in others:
                gates.open(job_id)
            wait_until(
                lambda: all(state == "completed" for state in _states(others).values()),
                what="the other two jobs written while the first write waits",
            )
            assert _states([held]) == {held: "running"}
        wait_until(lambda: _states([held]) == {held: "completed"}, what="the held job written once the lock goes")
    assert worker.completer.written == 3
    assert worker.completer.lost == 0


@pytest.mark.django_db(transaction=True)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property__one_row_held__every_other_outcome_written_meanwhile__each_once(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=2, max_value=5), label="jobs")
    order = data.draw(st.permutations(range(n)), label="end order")
    held_at = data.draw(st.integers(min_value=0, max_value=n - 1), label="the held job's place in the end order")
    weighted = data.draw(st.booleans(), label="weighted")
    queue = f"held_{uuid.uuid4().hex[:10]}"  # rows of earlier examples stay in the table
    gates, started = Gates(), list[int]()
    config = make_config(
        {queue: QueueConfig(queue, max_workers=n)},
        global_max_workers=n if weighted else None,
        heartbeat_interval=60.0,
        heartbeat_staleness=600.0,
    )
    ids = [Job.objects.enqueue("gated", queue=queue).pk for _ in range(n)]
    ending = [ids[i] for i in order]
    held = ending[held_at]

    with running_worker(config, registry=gated_registry(gates, started, queue)) as worker:
        wait_until(lambda: len(started) == n, what=f"{n} gated jobs running")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT id FROM awa_job WHERE id = %s FOR UPDATE", [held])
                cursor.execute("SELECT pg_backend_pid()")
                (holder,) = cursor.fetchone()
            for job_id in ending:
                gates.open(job_id)
                if job_id == held:
                    wait_until(lambda: _blocked_by(holder), what="the held job's write waiting on the lock")
                else:
                    wait_until(
                        functools.partial(_completed, job_id),
                        what=f"job {job_id} written while the held job {held} waits",
                    )
            assert _states([held]) == {held: "running"}
        wait_until(lambda: _states([held]) == {held: "completed"}, what="the held job written once the lock goes")
    assert worker.completer.written == n
    assert (worker.completer.lost, worker.completer.discarded, worker.completer.handed_back) == (0, 0, 0)
    assert sorted(Job.objects.filter(pk__in=ids).values_list("attempt", flat=True)) == [1] * n
