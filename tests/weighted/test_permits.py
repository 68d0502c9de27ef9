"""Permit before claim: every row marked running holds a permit in a live worker, and none is
left running after a graceful shutdown."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from awa_django.models import Job
from awa_django.worker import QueueConfig, WorkerConfig
from tests.harness import make_config, running_worker, wait_until
from tests.weighted.support import BLOCK_KIND, Recorder, Sampler, enqueue

PROBES = 100  # probes that saw running rows before the worker is stopped


def _weighted() -> WorkerConfig:
    return make_config(
        {"A": QueueConfig("A", min_workers=2, weight=3), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=24,
    )


def _hard_reserved() -> WorkerConfig:
    return make_config({"A": QueueConfig("A", max_workers=8), "B": QueueConfig("B", max_workers=12)})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("build", [_weighted, _hard_reserved], ids=["weighted", "hard_reserved"])
def test_permits__running_rows_never_outnumber_permits_held(build: Callable[[], WorkerConfig]) -> None:
    config = build()
    recorder = Recorder()
    with running_worker(config, registry=recorder.registry) as worker:
        # Short jobs of mixed lengths: many claims and releases per second.
        for ms in (20, 50, 80):
            enqueue("A", 400, ms=ms)
            enqueue("B", 200, ms=ms)
        with Sampler(["A", "B"], interval=0.01, probe_worker=worker) as sampler:
            wait_until(
                lambda: sum(1 for s in sampler.snapshot() if s.total > 0) >= PROBES,
                timeout=60,
                what=f"{PROBES} probes that saw rows running",
            )
        # Stop while jobs still wait and others run: stop claiming, let in-flight ones finish.
    samples = sampler.snapshot()
    violations = [s for s in samples if s.in_flight is not None and s.total > max(s.in_flight)]
    # Permits belong to a queue: the invariant also holds queue by queue.
    queue_violations = [
        s for s in samples if s.queue_in_flight is not None and any(s.running[q] > s.queue_in_flight[q] for q in "AB")
    ]
    assert not violations, f"rows running without a permit: {violations[:3]}"
    assert not queue_violations, f"a queue's rows running without its permits: {queue_violations[:3]}"
    # The probe runs on the worker's loop, so no permit moves while it counts.
    assert all(s.in_flight is not None and s.in_flight[0] == s.in_flight[1] for s in samples)
    # After shutdown: nothing left running, nothing still counted as in flight, nothing lost.
    assert Job.objects.filter(queue__in=["A", "B"], state="running").count() == 0
    assert worker.allocator.total_in_flight == 0
    assert Job.objects.filter(queue__in=["A", "B"]).exclude(state__in=["completed", "available"]).count() == 0
    assert Job.objects.filter(queue__in=["A", "B"], state="available").exists(), "the stop came too late"


@pytest.mark.django_db(transaction=True)
def test_permits__shutdown_timeout_hands_running_jobs_back() -> None:
    """Jobs that outlive the shutdown timeout are handed back, not left running."""
    recorder = Recorder()
    config = make_config(
        {"A": QueueConfig("A", min_workers=2, weight=3), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=24,
        shutdown_timeout=0.3,
    )
    with running_worker(config, registry=recorder.registry) as worker, Sampler(["A", "B"]) as sampler:
        enqueue("A", 30, ms=None, kind=BLOCK_KIND)
        enqueue("B", 10, ms=None, kind=BLOCK_KIND)
        sampler.wait_for(lambda s: s.total == 24, 30, "24 blocked jobs running")
    assert Job.objects.filter(queue__in=["A", "B"], state="running").count() == 0
    assert Job.objects.filter(queue__in=["A", "B"], state="retryable").count() == 24
    assert worker.allocator.total_in_flight == 0
