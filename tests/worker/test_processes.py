"""``awa_worker --processes N``: N real worker processes under one parent, the host's global
maximum held by all of them together (counted from the rows), its weights and floors too (counted
from the database's running rows, as the cluster-scope fairness test counts them), a dead child
started again, and a SIGTERM to the parent stopping every child cleanly."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from awa_django.models import Job, Queue, WorkerInstance
from tests.harness import wait_until
from tests.weighted.support import Sampler, between, contended, time_weighted_mean
from tests.worker.support import Spawner

FAST = ["--heartbeat-interval", "0.5", "--heartbeat-staleness", "3", "--poll-interval", "0.5"]


def _live_pids() -> set[int]:
    since = timezone.now() - timedelta(seconds=2)
    return set(WorkerInstance.objects.filter(last_seen_at__gte=since).values_list("pid", flat=True))


def _max_overlap(queue: str) -> int:
    """The most jobs of ``queue`` running at one instant, from their attempted_at/finalized_at."""
    events: list[tuple[object, int]] = []
    for started, ended in Job.objects.filter(queue=queue).values_list("attempted_at", "finalized_at"):
        events += [(started, 1), (ended, -1)]
    running = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at one instant
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.slow
def test_processes__children_share_the_host_maximum__a_dead_one_restarts__sigterm_stops_all(spawn: Spawner) -> None:
    parent = spawn("-q", "host", "--processes", "2", "--global-max-workers", "3", *FAST, name="parent")
    wait_until(lambda: len(_live_pids()) == 2, 60, 0.1, "two worker processes' snapshots")
    children = _live_pids()
    assert parent.process.pid not in children

    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": "sleep", "queue": "host", "args": {"seconds": 0.2}}] * 30)
    wait_until(lambda: Job.objects.filter(queue="host", state="completed").count() == 30, 60, 0.1, "30 done")
    # Process 0 takes 2 of the host's 3 slots and process 1 takes 1: 3 at most, and 3 reached.
    assert _max_overlap("host") == 3

    victim = min(children)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(_live_pids() - {victim}) == 2, 60, 0.1, "the killed process started again")
    parent.assert_alive()
    running = _live_pids() - {victim}
    assert len(running) == 2 and running & children  # one survivor, one new process

    parent.signal(signal.SIGTERM)
    assert parent.wait_exit() == 0, parent.log[-4000:]
    for pid in running:
        with pytest.raises(ProcessLookupError):  # every child exited with its parent
            os.kill(pid, 0)
    assert "worker process exited index=" in parent.log and "starting it again" in parent.log


def test_processes__a_split_that_cannot_be_made_is_refused_before_any_child_starts(spawn: Spawner) -> None:
    parent = spawn("-q", "host", "--processes", "4", "--global-max-workers", "3", name="refused")
    assert parent.wait_exit() == 1
    assert "global_max_workers=3 is fewer than the 4 worker processes" in parent.log, parent.log[-2000:]
    assert "worker process started" not in parent.log


@pytest.mark.slow
def test_processes__weights_and_floors_hold_for_the_host_across_the_children(spawn: Spawner) -> None:
    """Global 12 over two children; A min 2 weight 3, B min 2 weight 1 (the cluster test's shape).
    The host's ideal is A 2 + 6, B 2 + 2 (A's share 8/12): each child runs its half (global 6, A
    min 1, B min 1, a pool of 4 split 3:1), and the two together must show the host's split, never
    more than 12 running, from the database's running rows."""
    Queue.objects.create(name="A", min_workers=2, weight=3)
    Queue.objects.create(name="B", min_workers=2, weight=1)
    parent = spawn("-q", "A", "-q", "B", "--processes", "2", "--global-max-workers", "12", *FAST, name="parent")
    wait_until(lambda: len(_live_pids()) == 2, 60, 0.1, "two worker processes' snapshots")
    window_seconds = 5.0
    with Sampler(["A", "B"]) as sampler:
        with transaction.atomic():
            Job.objects.enqueue_many([{"kind": "sleep", "queue": "A", "args": {"seconds": 0.1}}] * 900)
            Job.objects.enqueue_many([{"kind": "sleep", "queue": "B", "args": {"seconds": 0.1}}] * 450)
        start = sampler.wait_for(lambda s: s.running["A"] > 0 and s.running["B"] > 0, 60, "both queues running").t
        sampler.wait_for(lambda s: s.t >= start + 1.0 + window_seconds, 60, "the measuring window to pass")
    samples = sampler.snapshot()
    window = between(contended(samples, ["A", "B"]), start + 1.0, start + 1.0 + window_seconds)
    assert len(window) >= 20, f"{len(window)} samples while both queues were loaded"
    assert window[-1].t - window[0].t >= window_seconds * 0.9, "both queues must stay loaded"
    mean_a = time_weighted_mean(window, lambda s: s.running["A"])
    mean_b = time_weighted_mean(window, lambda s: s.running["B"])
    parent.assert_alive()
    assert max(s.total for s in samples) <= 12
    assert abs(mean_a / (mean_a + mean_b) - 8 / 12) <= 0.05 * 8 / 12, (mean_a, mean_b)
    assert mean_a + mean_b >= 10, (mean_a, mean_b)
