"""Caps, work conservation and floors, measured from what a real worker ran.

Each test counts handlers running at once (exact, from the handlers themselves) and samples
``state='running'`` rows per queue from the database on a separate connection.
"""

from __future__ import annotations

import pytest

from awa_django.defaults import GLOBAL_MAX_WORKERS_MAX
from awa_django.models import Job
from awa_django.worker import QueueConfig
from tests.harness import make_config, running_worker, wait_until
from tests.weighted.support import (
    Recorder,
    Sample,
    Sampler,
    between,
    enqueue,
    wait_all_finished,
)

# A dip below the floor while the queue has available rows is allowed only for the time from a
# completion being written to the queue's next claim committing (the permit round trip), which
# the DB sampler can catch. It is counted in jobs, not seconds: the jobs (either queue's, from
# the handlers) that ended between a dip's first and last sample. Every job runs 400 ms in one of
# the worker's 20 slots, so a round trip shorter than a job sees at most one turn of the 20 slots
# end; a queue deprived of its floor for a whole job sees a second turn.
DIP_ENDS = 20
# ... and such dips may cover at most this share of the samples taken while the queue was loaded.
DIP_SHARE_TOLERANCE = 0.15


@pytest.mark.django_db(transaction=True)
def test_hard_reserved__max_workers_caps_running_at_exactly_max() -> None:
    recorder = Recorder()
    config = make_config({"A": QueueConfig("A", max_workers=5)})
    with Sampler(["A"]) as sampler, running_worker(config, registry=recorder.registry):
        enqueue("A", 10, ms=100)
        wait_all_finished(["A"])
    db_peak = max(s.running["A"] for s in sampler.snapshot())
    assert Job.objects.filter(queue="A", state="completed").count() == 10
    assert recorder.finished("A") == 10
    assert recorder.peak["A"] == 5
    assert db_peak <= 5


@pytest.mark.django_db(transaction=True)
def test_weighted__global_max_caps_total_running_and_is_reached() -> None:
    recorder = Recorder()
    config = make_config(
        {"A": QueueConfig("A", min_workers=2, weight=1), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=10,
    )
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry):
        enqueue("A", 20, ms=200)
        enqueue("B", 20, ms=200)
        wait_all_finished(["A", "B"])
    samples = sampler.snapshot()
    db_peak = max(s.total for s in samples)
    assert Job.objects.filter(queue__in=["A", "B"], state="completed").count() == 40
    assert recorder.total_peak == 10
    assert db_peak <= 10


@pytest.mark.django_db(transaction=True)
def test_weighted__sole_loaded_queue_takes_whole_overflow_pool() -> None:
    recorder = Recorder()
    config = make_config(
        {"A": QueueConfig("A", min_workers=5), "B": QueueConfig("B", min_workers=5)}, global_max_workers=20
    )
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry):
        enqueue("A", 30, ms=100)
        wait_all_finished(["A"])
    db_peak = max(s.running["A"] for s in sampler.snapshot())
    assert Job.objects.filter(queue="A", state="completed").count() == 30
    # B's 5 guaranteed slots stay reserved; A gets its own 5 plus the whole pool of 10.
    assert recorder.peak["A"] == 15
    assert db_peak <= 15


def _dips(samples: list[Sample], queue: str, floor: int) -> list[list[Sample]]:
    """Runs of consecutive samples with the queue below its floor while it still had available rows.

    Excluded: samples before the queue first reached its floor (the ramp-up) and samples at
    which it had no available rows (nothing to run).
    """
    reached = next((i for i, s in enumerate(samples) if s.running[queue] >= floor), None)
    assert reached is not None, f"queue {queue} never reached its floor of {floor}"
    dips: list[list[Sample]] = []
    current: list[Sample] = []
    for sample in samples[reached:]:
        if sample.available[queue] > 0 and sample.running[queue] < floor:
            current.append(sample)
        elif current:
            dips.append(current)
            current = []
    if current:
        dips.append(current)
    return dips


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("weight_a", "weight_b"), [(1, 1), (19, 1)], ids=["equal", "B-outweighed"])
def test_weighted__no_loaded_queue_drops_below_min_workers(weight_a: int, weight_b: int) -> None:
    """With weights 19:1 the pool goes almost wholly to A, so B runs on its floor alone."""
    recorder = Recorder()
    config = make_config(
        {
            "A": QueueConfig("A", min_workers=5, weight=weight_a),
            "B": QueueConfig("B", min_workers=5, weight=weight_b),
        },
        global_max_workers=20,
    )
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry):
        enqueue("A", 100, ms=400)
        enqueue("B", 40, ms=400)
        wait_all_finished(["A", "B"])
    samples = sampler.snapshot()
    assert Job.objects.filter(queue__in=["A", "B"], state="completed").count() == 140
    for queue in ("A", "B"):
        dips = _dips(samples, queue, 5)
        # A dip's extent is taken from its first to its last sample, and the share below the floor
        # is a share of samples, not of time: a sampler stalled by load can stretch neither.
        most = max((sum(recorder.ended_between(q, d[0].t, d[-1].t) for q in "AB") for d in dips), default=0)
        reached = next(s.t for s in samples if s.running[queue] >= 5)
        window = [s for s in between(samples, reached) if s.available[queue] > 0]
        share = sum(len(d) for d in dips) / len(window)
        assert most <= DIP_ENDS, f"{queue} stayed below its min_workers while {most} jobs ended"
        assert share <= DIP_SHARE_TOLERANCE, f"{queue} was below min in {share:.1%} of its loaded samples"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("global_max_workers", [None, GLOBAL_MAX_WORKERS_MAX])
def test_capacity__the_largest_maximum_runs_jobs_and_gives_every_slot_back(global_max_workers: int | None) -> None:
    """Each poll asks for every slot the maximum allows (2**31 - 1 here; hard-reserved: the
    queue's max_workers at the column's limit): the worker claims, hands over and ends its jobs
    as with a small one, and every slot it took comes back."""
    recorder = Recorder()
    largest = GLOBAL_MAX_WORKERS_MAX
    queues = {
        "A": QueueConfig("A", max_workers=largest, min_workers=1),
        "B": QueueConfig("B", max_workers=largest, weight=2),
    }
    config = make_config(queues, global_max_workers=global_max_workers)
    with running_worker(config, registry=recorder.registry) as worker:
        enqueue("A", 30, ms=20)
        enqueue("B", 30, ms=20)
        wait_all_finished(["A", "B"])
        allocator = worker.runtime.allocator
        wait_until(lambda: allocator.total_in_flight == 0, what="every slot back")
    assert Job.objects.filter(queue__in=["A", "B"], state="completed").count() == 60
    assert recorder.finished("A") == recorder.finished("B") == 30
