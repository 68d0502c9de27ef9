"""Durable jobs in a running worker (in process, on its own connections): parked jobs hold no
slot, resumed ones run their remaining steps once, and signals wake waiting jobs.

Sleepers sleep an hour and their wake time is then brought to now (as their time had come), so
no test waits out real time or depends on the machine's speed; the rows are polled throughout
and every assertion reads what the database shows."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from awa_django.models import FairKey, Job, Queue
from awa_django.registry import JobHandler, Registry
from awa_django.worker import JobContext
from awa_django.worker.config import QueueConfig
from tests.durable.support import expire, steps_of
from tests.harness import make_config, running_worker, wait_until

QUEUE = "durable-worker"
LIMIT = 3
PARKED = 50
SHORT = 30

_lock = threading.Lock()
ran: Counter[tuple[int, str]] = Counter()


def _count(job_id: int, name: str) -> str:
    with _lock:
        ran[(job_id, name)] += 1
    return name


def _sleeper(context: JobContext) -> Any:
    a = context.step("a", _count, context.job_id, "a")
    context.sleep(3600)
    b = context.step("b", _count, context.job_id, "b")
    return [a, b]


def _waiter(context: JobContext) -> Any:
    a = context.step("a", _count, context.job_id, "a")
    payload = context.wait_for("go")
    b = context.step("b", _count, context.job_id, "b")
    return [a, payload, b]


def _short(context: JobContext) -> str:
    return "done"


def _registry() -> Registry:
    registry = Registry()
    for kind, func in (("durable.sleeper", _sleeper), ("durable.waiter", _waiter), ("durable.short", _short)):
        registry.register(JobHandler(kind, func, queue=QUEUE, takes_context=True, max_attempts=3))
    return registry


class Rows:
    """Polls the queue's rows in a thread: the most running at once, and each poll's counts."""

    def __init__(self) -> None:
        self.polls: list[dict[str, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="durable-rows", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT kind, state, count(*) FROM awa_job_all WHERE queue = %s GROUP BY kind, state", [QUEUE]
                    )
                    counts: Counter[str] = Counter()
                    for kind, state, n in cursor.fetchall():
                        counts[state] += n
                        counts[f"{kind}:{state}"] += n
                self.polls.append(dict(counts))
                self.stop.wait(0.01)
        finally:
            connections.close_all()

    @property
    def most_running(self) -> int:
        return max((poll.get("running", 0) for poll in self.polls), default=0)


@pytest.fixture
def rows() -> Iterator[Rows]:
    watcher = Rows()
    watcher.thread.start()
    try:
        yield watcher
    finally:
        watcher.stop.set()
        watcher.thread.join(10)


def _states(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(id__in=ids).values_list("state", flat=True))


@pytest.mark.parametrize("kind", ["durable.sleeper", "durable.waiter"])
@pytest.mark.django_db(transaction=True)
def test_parked_jobs__hold_no_slot__short_jobs_run_meanwhile__then_they_resume_with_steps_run_once(
    kind: str, rows: Rows
) -> None:
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=LIMIT)})
    with running_worker(config, registry=_registry()):
        parked = [Job.objects.enqueue(kind, {}, queue=QUEUE).id for _ in range(PARKED)]
        parked_state = "scheduled" if kind == "durable.sleeper" else "waiting"
        wait_until(lambda: _states(parked)[parked_state] == PARKED, timeout=120, what=f"{PARKED} jobs parked")
        assert all(row.attempt == 0 for row in Job.objects.filter(id__in=parked))  # no attempt spent
        short = [Job.objects.enqueue("durable.short", {}, queue=QUEUE).id for _ in range(SHORT)]
        wait_until(lambda: _states(short)["completed"] == SHORT, timeout=120, what=f"{SHORT} short jobs completed")
        # The short jobs ran while every parked job stayed parked: read from the rows.
        assert _states(parked) == {parked_state: PARKED}
        assert any(
            poll.get(f"{kind}:{parked_state}") == PARKED and poll.get("durable.short:running", 0) > 0
            for poll in rows.polls
        ), "no poll saw short jobs running while all the parked jobs were parked"
        for job_id in parked:  # their time comes (a sleep's wake time; a signal for the waiters)
            if kind == "durable.sleeper":
                expire(job_id)
            else:
                assert Job.objects.signal(job_id, "go", job_id).woke
        wait_until(lambda: _states(parked)["completed"] == PARKED, timeout=120, what=f"{PARKED} resumed and completed")
    # Parked jobs never counted running: no poll of the rows saw more running than the limit.
    assert rows.most_running <= LIMIT, rows.most_running
    for job_id in parked:
        assert ran[(job_id, "a")] == 1 and ran[(job_id, "b")] == 1, job_id
        job = Job.objects.get(id=job_id)
        assert job.attempt == 1
        assert job.result == (["a", "b"] if kind == "durable.sleeper" else ["a", job_id, "b"])


KEYED = 10


@pytest.mark.django_db(transaction=True)
def test_parked_jobs__hold_no_share_of_their_fair_key__its_short_jobs_run_meanwhile(rows: Rows) -> None:
    """A fair key capped at one running job: its sleepers park one after another, and its short
    jobs, enqueued while every sleeper is parked, all run under the same cap: a parked job is not
    counted in its key's share (the keyed claim counts running rows). Read from the rows: the key
    never had more than one job running."""
    Queue.objects.create(name=QUEUE, max_workers=LIMIT)
    FairKey.objects.create(queue=QUEUE, key="tenant", max_running=1)
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=LIMIT)})
    with running_worker(config, registry=_registry()):
        parked = [Job.objects.enqueue("durable.sleeper", {}, queue=QUEUE, fair_key="tenant").id for _ in range(KEYED)]
        wait_until(lambda: _states(parked)["scheduled"] == KEYED, timeout=120, what=f"{KEYED} keyed jobs parked")
        short = [Job.objects.enqueue("durable.short", {}, queue=QUEUE, fair_key="tenant").id for _ in range(KEYED)]
        wait_until(lambda: _states(short)["completed"] == KEYED, timeout=120, what=f"{KEYED} short keyed jobs done")
        assert _states(parked) == {"scheduled": KEYED}
        for job_id in parked:
            expire(job_id)
        wait_until(lambda: _states(parked)["completed"] == KEYED, timeout=120, what=f"{KEYED} resumed and completed")
    assert rows.most_running <= 1, rows.most_running  # every job of the queue is the capped key's
    assert all(ran[(job_id, "a")] == 1 and ran[(job_id, "b")] == 1 for job_id in parked)


SIGNALLED = 1000


@pytest.mark.django_db(transaction=True)
def test_signals__1000_waiting_jobs__each_woken_by_its_signal(rows: Rows) -> None:
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=10)})
    with running_worker(config, registry=_registry()):
        Job.objects.enqueue_many({"kind": "durable.waiter", "queue": QUEUE} for _ in range(SIGNALLED))
        waiting = list(Job.objects.filter(queue=QUEUE).values_list("id", flat=True))
        assert len(waiting) == SIGNALLED
        wait_until(lambda: _states(waiting)["waiting"] == SIGNALLED, timeout=300, what="1000 jobs waiting")
        woke = sum(Job.objects.signal(job_id, "go", job_id).woke for job_id in waiting)
        assert woke == SIGNALLED
        wait_until(lambda: _states(waiting)["completed"] == SIGNALLED, timeout=300, what="1000 jobs completed")
    for job_id in waiting[:: SIGNALLED // 50]:
        assert Job.objects.get(id=job_id).result == ["a", job_id, "b"]
        assert steps_of(job_id)["wait:go#1"].result == job_id
    assert all(ran[(job_id, "a")] == 1 and ran[(job_id, "b")] == 1 for job_id in waiting)


RACED = 200


@pytest.mark.django_db(transaction=True)
def test_signals__sent_while_the_jobs_run_and_park__no_wake_up_lost(rows: Rows) -> None:
    """Each job is signalled right after it is enqueued, so signals land before the wait, while the
    attempt runs, between its wait and its park, and after it: every job completes with its
    payload, and none is left waiting with its event kept."""
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=10)})
    with running_worker(config, registry=_registry()):
        raced: list[int] = []
        # Each job signalled as the next one is enqueued: the worker is at its first attempt meanwhile.
        for _ in range(RACED):
            raced.append(Job.objects.enqueue("durable.waiter", {}, queue=QUEUE).id)
            if len(raced) > 1:
                Job.objects.signal(raced[-2], "go", raced[-2])
        Job.objects.signal(raced[-1], "go", raced[-1])
        wait_until(lambda: _states(raced)["completed"] == RACED, timeout=300, what=f"{RACED} jobs completed")
    for job_id in raced:
        assert Job.objects.get(id=job_id).result == ["a", job_id, "b"]
