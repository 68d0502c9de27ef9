"""Hard-reserved mode: a queue never runs more than its max_workers jobs at once, and uses them all."""

from __future__ import annotations

import asyncio

import pytest

from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until


@pytest.mark.django_db(transaction=True)
def test_hard_reserved__max_workers_5__peak_concurrency_is_exactly_5() -> None:
    running = {"now": 0, "peak": 0, "runs": 0}

    async def hold() -> None:
        running["now"] += 1
        running["peak"] = max(running["peak"], running["now"])
        await asyncio.sleep(0.1)
        running["now"] -= 1
        running["runs"] += 1

    registry = Registry()
    registry.register(JobHandler("hold", hold, queue="reserved"))
    Job.objects.enqueue_many([{"kind": "hold", "queue": "reserved"} for _ in range(10)])
    running_rows: list[int] = []

    def drained() -> bool:
        running_rows.append(Job.objects.running().count())
        return Job.objects.completed().count() == 10

    config = make_config({"reserved": QueueConfig("reserved", max_workers=5)})
    with running_worker(config, registry=registry) as worker:
        wait_until(drained, timeout=60, interval=0.005, what="10 completed jobs")
        assert worker.health()["reserved"]["capacity"] == {"type": "HardReserved", "max_workers": 5}

    assert running["peak"] == 5
    assert running["runs"] == 10
    assert max(running_rows) <= 5, running_rows
    assert Job.objects.exclude(state="completed").count() == 0
