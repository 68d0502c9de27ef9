"""Live reconfiguration: a Queue row saved through the ORM reaches the running worker (the trigger
NOTIFYs it) and moves the running split; an invalid row is refused and the last good
configuration keeps running.

How soon the split moves is counted in A's job ends after the save, not in seconds; the time on
the clock is measured by ``bench/convergence.py``."""

from __future__ import annotations

import logging
import time

import pytest

from awa_django.concurrency import Weighted
from awa_django.models import Queue
from awa_django.worker import QueueConfig, WorkerConfig
from tests.harness import make_config, running_worker, wait_until
from tests.weighted.support import (
    Recorder,
    Sample,
    Sampler,
    between,
    enqueue,
    split_problems,
    time_weighted_mean,
)

# A's job ends between the save's commit and the first even split. A goes from 17 to 12, so at
# least five of its jobs must end (their slots go to B) once the worker holds the new weight; A's
# 17 jobs end at 17 / 150 ms, and the bound allows three turns of them for the notification,
# the re-read and the hand-over.
CONVERGENCE_ENDS = 3 * 17
# The tolerances on the time-averaged split are in tests.weighted.support (split_problems).
# A single sample counts as "moved" when both queues are within 1 of 12.
MOVED_TOLERANCE = 1
WINDOW = 1.0  # seconds of samples averaged for each split


def _rows_and_config(**overrides: float) -> WorkerConfig:
    # The rows match the configuration the worker starts with: it re-reads them on each NOTIFY
    # and every reconfigure_interval.
    Queue.objects.create(name="A", min_workers=2, weight=3)
    Queue.objects.create(name="B", min_workers=2, weight=1)
    return make_config(
        {"A": QueueConfig("A", min_workers=2, weight=3), "B": QueueConfig("B", min_workers=2, weight=1)},
        global_max_workers=24,
        **overrides,
    )


def _split(sampler: Sampler, start: float, end: float) -> tuple[float, float]:
    window = between(sampler.snapshot(), start, end)
    assert len(window) >= 10, f"only {len(window)} samples between {start:.2f} and {end:.2f}"
    assert all(s.available["A"] > 0 and s.available["B"] > 0 for s in window), "a queue ran dry in the window"
    return (
        time_weighted_mean(window, lambda s: s.running["A"]),
        time_weighted_mean(window, lambda s: s.running["B"]),
    )


def _settle_at_17_7(sampler: Sampler) -> None:
    """Wait for the weighted split to settle, then measure it over WINDOW seconds."""
    settled = sampler.wait_for(lambda s: s.running["A"] == 17 and s.running["B"] == 7, 30, "a 17:7 split")
    time.sleep(WINDOW)
    mean_a, mean_b = _split(sampler, settled.t, settled.t + WINDOW)
    assert not split_problems(mean_a, mean_b, 17, 7), "the split before the change"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_reconfigure__weight_saved_in_orm_moves_running_split_on_its_notification() -> None:
    # No fallback re-read within the test: only the NOTIFY the save sends can bring the new weight.
    config = _rows_and_config(reconfigure_interval=3600.0)
    recorder = Recorder()
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry) as worker:
        enqueue("A", 700, ms=150)
        enqueue("B", 600, ms=150)
        _settle_at_17_7(sampler)
        Queue.objects.filter(name="B").update(weight=3)  # autocommit: committed on return
        saved = time.monotonic()

        def moved(s: Sample) -> bool:
            return abs(s.running["A"] - 12) <= MOVED_TOLERANCE and abs(s.running["B"] - 12) <= MOVED_TOLERANCE

        reached = sampler.wait_for(moved, 30, "an even split after B's weight went to 3")
        time.sleep(WINDOW)
        after = _split(sampler, reached.t, reached.t + WINDOW)
        capacity = worker.allocator.capacity("B")
    a_ended = recorder.ended_between("A", saved, reached.t)
    assert isinstance(capacity, Weighted) and capacity.weight == 3
    assert a_ended <= CONVERGENCE_ENDS, f"the split moved only after {a_ended} of A's jobs ended"
    assert not split_problems(*after, 12, 12)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_reconfigure__invalid_row_is_refused_and_last_good_split_kept(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="awa_django.worker.reconfigure")
    config = _rows_and_config()
    recorder = Recorder()
    with Sampler(["A", "B"]) as sampler, running_worker(config, registry=recorder.registry) as worker:
        enqueue("A", 600, ms=150)
        enqueue("B", 300, ms=150)
        _settle_at_17_7(sampler)
        # Behind the admin's back: 23 + 2 = 25 guaranteed slots cannot fit in a global maximum of 24.
        Queue.objects.filter(name="A").update(min_workers=23)

        def refused() -> list[logging.LogRecord]:
            return [
                r
                for r in caplog.records
                if r.name == "awa_django.worker.reconfigure"
                and r.levelno == logging.ERROR
                and "min_workers (25)" in r.getMessage()
            ]

        records = wait_until(refused, timeout=30, what="the worker to log that it refused the settings")
        logged = time.monotonic()
        time.sleep(WINDOW)
        after = _split(sampler, logged, logged + WINDOW)
        kept_config = worker.config.queues["A"]
        kept_capacity = worker.allocator.capacity("A")
    message = records[0].getMessage()
    assert "global_max_workers (24)" in message
    assert kept_config.min_workers == 2
    assert isinstance(kept_capacity, Weighted)
    assert (kept_capacity.min_workers, kept_capacity.weight) == (2, 3)
    assert not split_problems(*after, 17, 7), "the split after the refused change"
    # Logged once, not on every re-read.
    assert len(refused()) == 1
