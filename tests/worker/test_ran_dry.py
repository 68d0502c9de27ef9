"""In weighted mode, a claim that fills every permit and leaves no due job says so (claim_jobs'
``more``), and the runner stops contending for slots at once: not hungry, no demand in the allocator, while its jobs
still run. Before, it believed in backlog until one more claim (its own, or the writer's hand-over
when a job ended) came back empty; in weighted mode its demand meanwhile held slots away from the
other queues (1,000 one-job queues sharing 50 slots: bench/many_queues.py).

A claim that fills every permit with jobs left behind keeps the runner hungry.

A hard-reserved worker claims without the probe (claim_jobs_unprobed; claim_jobs.sql says why: it
cost every claim, and an idle queue's pickup tail): its queue's slots are its own, so a claim that
fills leaves the runner looking again, and the claims that follow as its jobs end tell it that the
queue ran dry.
"""

from __future__ import annotations

import pytest

from awa_django.models import Job
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.worker.support import Gates, gated_registry, on_loop

QUEUE = "dry"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("global_max", "jobs", "left"),
    [(None, 4, True), (3, 3, False), (3, 4, True)],
    ids=["one_more-hard_reserved", "exactly_its_permits-weighted", "one_more-weighted"],
)
def test_claim_that_fills_its_permits__runner_stands_down_only_if_no_job_is_left(
    gates: Gates, global_max: int | None, jobs: int, left: bool
) -> None:
    started: list[int] = []
    # Three slots either way: hard-reserved max_workers 3, or weighted with a global maximum of 3
    # (the queue's whole overflow pool, which it holds only while it contends). A 60 s poll
    # interval: no backlog probe speaks while the test looks.
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=3)}, global_max_workers=global_max, poll_interval=60.0)
    ids = [Job.objects.enqueue("gated", queue=QUEUE).pk for _ in range(jobs)]

    with running_worker(config, registry=gated_registry(gates, started, QUEUE)) as worker:
        wait_until(lambda: len(started) == 3, what="three gated jobs running")
        runner, allocator = worker.runners[QUEUE], worker.allocator
        # Read on the worker's loop: a runner standing down marks itself not hungry, then clears
        # its demand, and a read from this thread between the two saw it not hungry with demand.
        if left:
            # Its claim filled the three permits and left a job: it asks again, and is refused.
            wait_until(
                lambda: on_loop(worker, lambda: allocator.demand(QUEUE)) > 0, what="the runner asking for a fourth slot"
            )
            assert on_loop(worker, lambda: runner.hungry)
        else:
            # Its claim filled the three permits and said no job is left: it stands down while all
            # three still run (no job ended, so no hand-over claim could have told it).
            wait_until(lambda: not on_loop(worker, lambda: runner.hungry), what="the runner standing down")
            assert on_loop(worker, lambda: allocator.demand(QUEUE)) == 0
            assert sorted(started) == sorted(ids)
        assert on_loop(worker, lambda: allocator.in_flight(QUEUE)) == 3
        for job_id in ids:  # the fourth too, before it starts
            gates.open(job_id)
        wait_until(lambda: Job.objects.filter(pk__in=ids, state="completed").count() == jobs, what="every job done")
    assert sorted(started) == sorted(ids)


@pytest.mark.django_db(transaction=True)
def test_hard_reserved_claim_that_fills_exactly__runner_looks_again_then_stands_down(gates: Gates) -> None:
    started: list[int] = []
    config = make_config({QUEUE: QueueConfig(QUEUE, max_workers=3)}, poll_interval=60.0)
    ids = [Job.objects.enqueue("gated", queue=QUEUE).pk for _ in range(3)]

    with running_worker(config, registry=gated_registry(gates, started, QUEUE)) as worker:
        wait_until(lambda: len(started) == 3, what="three gated jobs running")
        runner, allocator = worker.runners[QUEUE], worker.allocator
        assert on_loop(worker, lambda: runner.hungry)  # its claim filled, and no probe said the queue ran dry
        assert on_loop(worker, lambda: allocator.in_flight(QUEUE)) == 3
        for job_id in ids:
            gates.open(job_id)
        wait_until(lambda: Job.objects.filter(pk__in=ids, state="completed").count() == 3, what="every job done")
        wait_until(
            lambda: not on_loop(worker, lambda: runner.hungry),
            what="the runner standing down once a claim came back empty",
        )
        assert on_loop(worker, lambda: allocator.demand(QUEUE)) == 0  # read on the loop: see above
    assert sorted(started) == sorted(ids)
