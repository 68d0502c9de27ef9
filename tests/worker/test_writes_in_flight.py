"""A write held up in the database no longer holds up every other finished attempt: once the
write in flight has been out ``completer.STUCK_AFTER`` seconds, what ended meanwhile goes in a
second write, on another pooled connection (``completer.WRITES`` at most).

Here a test transaction holds the row lock of a running job, so the write of that job's outcome
waits on it (the database says so: the worker's session is among the lock's waiters); the
outcomes of two other jobs that end meanwhile are written by a second write while the first
still waits, as the rows show. Then the lock goes and the first job's write completes too. With
one write in flight at a time, the two waited for the lock (this test timed out there).

The property does the same over random shapes: how many jobs run, which of their rows the test
holds, the order the others end in, and where among them the held ones end (together, so their
outcomes make one write: two writes held up would be every write the writer has, and what ends
after them waits too). Each job ends once the one before it is accounted for, so no two outcomes
share a write by chance: every job whose row is not held is written while the held ones wait, and
once the locks go every job is written exactly once, under the attempt and lease it was claimed
with.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, gated_registry, row_when

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


def _attempts(ids: list[int]) -> dict[int, tuple[int, int]]:
    """{id: (attempt, run_lease)}."""
    return {
        pk: (attempt, lease)
        for pk, attempt, lease in Job.objects.filter(pk__in=ids).values_list("pk", "attempt", "run_lease")
    }


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


@dataclass(frozen=True)
class _Shape:
    jobs: int
    held: frozenset[int]  # which jobs (by enqueue order) have their rows held
    ending: tuple[int, ...]  # the order the other jobs end in
    held_after: int  # how many of those end before the held ones, which end together
    weighted: bool


@st.composite
def _shapes(draw: st.DrawFn) -> _Shape:
    jobs = draw(st.integers(min_value=2, max_value=5))
    held = draw(st.frozensets(st.integers(min_value=0, max_value=jobs - 1), min_size=1, max_size=jobs - 1))
    ending = tuple(draw(st.permutations([i for i in range(jobs) if i not in held])))
    held_after = draw(st.integers(min_value=0, max_value=len(ending)))
    return _Shape(jobs, held, ending, held_after, draw(st.booleans()))


@pytest.mark.django_db(transaction=True)
# A failing example waits out wait_until's timeout, so none is shrunk (each shape is small to read).
@settings(
    max_examples=8,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(shape=_shapes())
# The held write first and the others after it: each of them needs the second write.
@example(shape=_Shape(jobs=4, held=frozenset({0, 2}), ending=(3, 1), held_after=0, weighted=False))
def test_property__rows_held__every_other_outcome_written_meanwhile__then_each_once(shape: _Shape) -> None:
    queue = f"held{uuid.uuid4().hex[:8]}"  # its own queue and worker per example: the rows of the last stay
    gates = Gates()  # its own, not the fixture: one per example
    started: list[int] = []
    config = make_config(
        {queue: QueueConfig(queue, max_workers=shape.jobs)},
        global_max_workers=shape.jobs if shape.weighted else None,
        heartbeat_interval=60.0,  # no heartbeat touches the held rows while the test looks
        heartbeat_staleness=600.0,
    )
    ids = [Job.objects.enqueue("gated", queue=queue).pk for _ in range(shape.jobs)]
    held = [ids[i] for i in sorted(shape.held)]
    others = [ids[i] for i in shape.ending]

    with running_worker(config, registry=gated_registry(gates, started, queue)) as worker:
        try:
            wait_until(lambda: len(started) == shape.jobs, what=f"{shape.jobs} gated jobs running")
            claimed = _attempts(ids)
            assert {attempt for attempt, _ in claimed.values()} == {1}
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT id FROM awa_job WHERE id = ANY(%s) ORDER BY id FOR UPDATE", [held])
                    cursor.execute("SELECT pg_backend_pid()")
                    (holder,) = cursor.fetchone()
                ends: list[list[int]] = [[job_id] for job_id in others]
                ends.insert(shape.held_after, held)
                for end in ends:
                    if end is held:
                        gates.open_together(held)
                        wait_until(lambda: _blocked_by(holder), what=f"the write of {held} waiting on the locks")
                    else:
                        (job_id,) = end
                        gates.open(job_id)
                        wait_until(
                            row_when(job_id, state="completed"),
                            what=f"job {job_id} written while the write of {held} waits",
                        )
                wait_until(lambda: worker.completer.written == len(others), what="the writer counting the others")
                assert _states(held) == dict.fromkeys(held, "running")
                assert _blocked_by(holder)
            wait_until(
                lambda: set(_states(ids).values()) == {"completed"}, what=f"the write of {held} done once the locks go"
            )
        finally:
            gates.open_all()  # a failed example leaves no handler for the stop to wait out
    completer = worker.completer
    assert (completer.written, completer.pending) == (shape.jobs, 0)
    assert (completer.lost, completer.discarded, completer.handed_back) == (0, 0, 0)
    assert _attempts(ids) == claimed  # each written under the attempt and lease it was claimed with
