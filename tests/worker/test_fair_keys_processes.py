"""Fair keys with real ``awa_worker`` processes, measured from the rows (tests/worker/fairkeys.py).

Each attempt ran over [attempted_at, finalized_at); shares are slot-seconds while every key still
had jobs waiting, a key's peak is the most of its attempts overlapping at one instant.
"""

from __future__ import annotations

import itertools

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
    # 150 ms jobs: "promptly" is counted in A's starts (four rounds of its four slots), and B's
    # NOTIFY and the subprocess's read of it take machine time: with 50 ms jobs the 16 starts were
    # 200 ms, which a loaded CI host can spend before the worker knows of B at all.
    add_jobs(QUEUE, "A", 1000, seconds=0.15)
    wait_until(lambda: drained(workers, 12), timeout=60, interval=0.05, what="A under way")
    add_jobs(QUEUE, "B", 40, seconds=0.15)
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


ROTATION_KEYS = 1000
ROTATION_JOBS = 3  # per key
# A claim's grants share one statement timestamp, ordered here by id, not by grant: a batch (up to
# the queue's 10 slots) reads as reordered; and the hand-over passes slots a few at a time.
FIRST_SLACK = 10  # attempts
WAIT_SLACK = 0.10  # a tenth over the bound below: run times measured on a shared, loaded machine


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes__1000_equal_keys_on_10_slots__each_served_within_one_rotation(spawn: Spawner) -> None:
    """1,000 backlogged keys, 3 jobs of 50 ms each, inserted key after key (plain order would run
    each key's three back to back), one worker process with 10 slots, measured from the rows:

    - ordered by start, every key's first attempt is among the first 1,000 (one rotation, about
      100 releases of the 10 slots), give or take a batch;
    - between two attempts of a key, the other keys hold at most a rotation of its own attempt's
      slot-seconds plus two of their own (999 x (d + 2 x mean)): slots rotate by slot-seconds, each
      backlogged key's tag within one attempt of the others', so a key whose attempt ran long here
      (this machine stretches a 50 ms sleep to 60-150 ms) waits until the others caught up, and one
      served first in a rotation can be served last in the next."""
    Queue.objects.create(name=QUEUE, max_workers=10)
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="sleep", queue=QUEUE, fair_key=f"t{k:04d}", args={"seconds": 0.05}, state="available", run_at=now)
        for k in range(ROTATION_KEYS)
        for _ in range(ROTATION_JOBS)
    )
    total = ROTATION_KEYS * ROTATION_JOBS
    workers = start(spawn, 1)
    wait_until(lambda: drained(workers, total), timeout=180, interval=0.2, what=f"{total} jobs done")
    runs = ran(QUEUE)
    assert len(runs) == total
    positions: dict[str, list[int]] = {}
    for index, r in enumerate(runs):
        positions.setdefault(r.key, []).append(index)
    assert len(positions) == ROTATION_KEYS
    last_first = max(p[0] for p in positions.values())
    assert last_first < ROTATION_KEYS + FIRST_SLACK, last_first
    held = [(r.end - r.start).total_seconds() for r in runs]
    mean = sum(held) / len(held)
    before = list(itertools.accumulate(held, initial=0.0))  # before[i]: slot-seconds of runs[:i]
    over = []
    for p in positions.values():
        for a, b in itertools.pairwise(p):
            others = before[b] - before[a + 1]
            bound = (ROTATION_KEYS - 1) * (held[a] + 2 * mean) * (1 + WAIT_SLACK)
            if others > bound:
                over.append((runs[a].key, b - a, round(others, 2), round(bound, 2)))
    assert over == [], over[:10]
