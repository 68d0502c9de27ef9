"""Fair keys with real ``awa_worker`` processes, measured from the rows (tests/worker/fairkeys.py).

Each attempt ran over [attempted_at, finalized_at); shares are slot-seconds while every key still
had jobs waiting, a key's peak is the most of its attempts overlapping at one instant.
"""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from awa_django.models import FairKey, Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.worker.fairkeys import add_jobs, all_backlogged_until, peak_running, ran, shares
from tests.worker.support import SpawnedWorker, Spawner

QUEUE = "keyed"
ARGS = ("-q", QUEUE, "--poll-interval", "0.5", "--heartbeat-interval", "0.5")


def drained(workers: list[SpawnedWorker], n: int) -> bool:
    for worker in workers:
        worker.assert_alive()
    return Job.objects.filter(queue=QUEUE, state="completed").count() >= n


def start(spawn: Spawner, n: int) -> list[SpawnedWorker]:
    workers = [spawn(*ARGS, name="w0")]
    # One at a time: workers starting at the same instant can race on the code's schedules.
    wait_until(lambda: WorkerInstance.objects.exists(), timeout=60, what="the first worker up")
    for i in range(1, n):
        workers.append(spawn(*ARGS, name=f"w{i}"))
    wait_until(lambda: WorkerInstance.objects.count() >= n, timeout=60, what=f"{n} workers up")
    return workers


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes__cap_2_across_3_workers__never_3_running(spawn: Spawner) -> None:
    Queue.objects.create(name=QUEUE, max_workers=6, key_max_running=2)
    workers = start(spawn, 3)
    add_jobs(QUEUE, "a", 60, seconds=0.05)
    add_jobs(QUEUE, "b", 60, seconds=0.05)
    wait_until(lambda: drained(workers, 120), timeout=120, interval=0.1, what="120 jobs done")
    peak = peak_running(ran(QUEUE))
    assert peak["a"] == 2 and peak["b"] == 2, peak


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes__flood_and_newcomer__newcomer_served_promptly_then_half(spawn: Spawner) -> None:
    Queue.objects.create(name=QUEUE, max_workers=4)
    workers = start(spawn, 1)
    add_jobs(QUEUE, "A", 1000, seconds=0.05)
    wait_until(lambda: drained(workers, 40), timeout=60, interval=0.05, what="A under way")
    add_jobs(QUEUE, "B", 50, seconds=0.05)
    b_committed = timezone.now()  # just after the commit (created_at is taken before the insert)
    wait_until(
        lambda: not Job.objects.filter(queue=QUEUE, fair_key="B").exclude(state="completed").exists(),
        timeout=60,
        what="B done",
    )
    runs = ran(QUEUE)
    first_b = next(r for r in runs if r.key == "B")
    # Promptly, counted in slot releases: the allocator serves B at the first grant once it knows
    # of B; before that, B's NOTIFY and the runner's read of arrivals, a few rounds of releases.
    a_between = [r for r in runs if r.key == "A" and b_committed <= r.start < first_b.start]
    assert len(a_between) <= 4 * 4, len(a_between)
    assert shares(runs, first_b.start, all_backlogged_until(runs, ["A", "B"]))["B"] >= 0.45


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes__weights_1_2_5_over_two_workers__each_within_5_percent(spawn: Spawner) -> None:
    Queue.objects.create(name=QUEUE, max_workers=8)
    for key, weight in (("w1", 1), ("w2", 2), ("w5", 5)):
        FairKey.objects.create(queue=QUEUE, key=key, weight=weight)
    workers = start(spawn, 2)
    with transaction.atomic():  # the three keys' jobs arrive together
        for key, weight in (("w1", 1), ("w2", 2), ("w5", 5)):
            add_jobs(QUEUE, key, 80 * weight, seconds=0.05)
    wait_until(lambda: drained(workers, 640), timeout=120, interval=0.1, what="640 jobs done")
    runs = ran(QUEUE)
    got = shares(runs, runs[0].start, all_backlogged_until(runs, ["w1", "w2", "w5"]))
    for key, ideal in (("w1", 1 / 8), ("w2", 2 / 8), ("w5", 5 / 8)):
        assert abs(got[key] - ideal) <= 0.05 * ideal, got


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes__a_lone_key_uses_the_whole_queue(spawn: Spawner) -> None:
    Queue.objects.create(name=QUEUE, max_workers=6)
    workers = start(spawn, 1)
    add_jobs(QUEUE, "only", 90, seconds=0.05)
    wait_until(lambda: drained(workers, 90), timeout=60, interval=0.1, what="90 jobs done")
    assert peak_running(ran(QUEUE))["only"] == 6
