"""Health in weighted mode: worker.health() and the WorkerInstance row report each queue's
Weighted(min_workers, weight, overflow_held) capacity with its in-flight and available permits."""

from __future__ import annotations

from typing import Any

import pytest

from awa_django.concurrency import Weighted
from awa_django.models import Queue, WorkerInstance
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.weighted.support import BLOCK_KIND, Recorder, Sampler, enqueue, wait_all_finished


def _expected(min_workers: int, weight: int, overflow_held: int, in_flight: int, available: int) -> dict[str, Any]:
    return {
        "mode": "weighted",
        "in_flight": in_flight,
        "available": available,
        "capacity": {"type": "Weighted", "min_workers": min_workers, "weight": weight, "overflow_held": overflow_held},
        "paused": False,
    }


def _matches(entry: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    return entry is not None and all(entry.get(key) == value for key, value in expected.items())


@pytest.mark.django_db(transaction=True)
def test_health__weighted_capacity_in_flight_and_available_per_queue() -> None:
    Queue.objects.create(name="A", min_workers=2, weight=3)
    Queue.objects.create(name="B", min_workers=2, weight=1)
    config = make_config(
        {"A": QueueConfig("A", min_workers=2, weight=3), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=24,
    )
    recorder = Recorder()
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry) as worker:
        # A alone takes its 2 slots and the whole pool of 20 (8 of its 30 jobs wait); then B gets
        # only its own 2 slots (1 of its 3 jobs waits): the pool is spent.
        enqueue("A", 30, ms=None, kind=BLOCK_KIND)
        sampler.wait_for(lambda s: s.running["A"] == 22, 30, "A to hold its slots and the whole pool")
        enqueue("B", 3, ms=None, kind=BLOCK_KIND)
        sampler.wait_for(lambda s: s.running["B"] == 2, 30, "B to run on its 2 guaranteed slots")
        # Nothing moves now (the jobs block), but a poll may hold permits for a moment: wait for rest.
        want_a = _expected(2, 3, overflow_held=20, in_flight=22, available=0)
        want_b = _expected(2, 1, overflow_held=0, in_flight=2, available=0)
        health = wait_until(
            lambda: (h := worker.health()) and _matches(h.get("A"), want_a) and _matches(h.get("B"), want_b) and h,
            timeout=30,
            what=f"health() to report A={want_a} B={want_b}; last: {worker.health()}",
        )
        assert set(health) == {"A", "B"}
        assert worker.allocator.capacity("A") == Weighted(min_workers=2, weight=3, overflow_held=20)
        assert worker.allocator.capacity("B") == Weighted(min_workers=2, weight=1, overflow_held=0)

        # The snapshot row says the same, with the available rows counted in the database.
        def row_matches() -> bool:
            row = WorkerInstance.objects.filter(instance_id=worker.instance_id).first()
            return (
                row is not None
                and row.mode == "weighted"
                and row.global_max_workers == 24
                and _matches(row.capacity("A"), {**want_a, "jobs_available": 8})
                and _matches(row.capacity("B"), {**want_b, "jobs_available": 1})
            )

        wait_until(row_matches, timeout=30, what="the WorkerInstance row to report both queues")

        # Once the jobs end, everything is handed back: both queues are idle with full headroom.
        recorder.gate.set()
        wait_all_finished(["A", "B"])
        # A idle queue's available permits: its own slots plus its share of the pool, counted as a
        # contender (A: 2 + 20 = 22 when it is the only one holding anything; here nothing is held).
        idle_a = _expected(2, 3, overflow_held=0, in_flight=0, available=22)
        idle_b = _expected(2, 1, overflow_held=0, in_flight=0, available=22)
        wait_until(
            lambda: _matches(worker.health().get("A"), idle_a) and _matches(worker.health().get("B"), idle_b),
            timeout=30,
            what=f"health() to report both queues idle; last: {worker.health()}",
        )
