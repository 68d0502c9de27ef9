"""Measuring what a real worker actually ran: handler-side counters and a DB sampler.

Concurrency is never read from the allocator's own counters alone. Two independent views:

* ``Recorder``: test-local handlers record each job's start and end per queue (thread-safe), so
  the peak of handlers running at once is exact.
* ``Sampler``: a thread with its own connection counts ``state='running'`` and
  ``state='available'`` rows per queue every ~15 ms. A sample's ``t`` is taken after the count
  returned, so a time measured up to it is never shorter than the true one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from django.db import transaction

from awa_django.context import JobContext
from awa_django.models import Job
from awa_django.registry import JobHandler, Registry
from awa_django.worker.supervisor import Worker
from tests.conftest import connect_outside_django

SLEEP_KIND = "weighted.sleep"
BLOCK_KIND = "weighted.block"


class Recorder:
    """Handlers that record, per queue, when each job started and ended, and the peak running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.total_running = 0
        self.total_peak = 0
        self.starts: dict[str, list[float]] = {}
        self.ends: dict[str, list[float]] = {}
        self.gate = threading.Event()  # opens every BLOCK_KIND job
        self.registry = Registry()
        self.registry.register(JobHandler(SLEEP_KIND, self.sleep, takes_context=True))
        self.registry.register(JobHandler(BLOCK_KIND, self.block, takes_context=True))

    def _started(self, queue: str) -> None:
        with self._lock:
            self.starts.setdefault(queue, []).append(time.monotonic())
            self.running[queue] = self.running.get(queue, 0) + 1
            self.peak[queue] = max(self.peak.get(queue, 0), self.running[queue])
            self.total_running += 1
            self.total_peak = max(self.total_peak, self.total_running)

    def _ended(self, queue: str) -> None:
        with self._lock:
            self.ends.setdefault(queue, []).append(time.monotonic())
            self.running[queue] -= 1
            self.total_running -= 1

    async def sleep(self, context: JobContext, ms: int = 100) -> None:
        self._started(context.queue)
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            self._ended(context.queue)

    async def block(self, context: JobContext) -> None:
        self._started(context.queue)
        try:
            while not self.gate.is_set():  # noqa: ASYNC110 - a threading.Event, opened from the test thread
                await asyncio.sleep(0.01)
        finally:
            self._ended(context.queue)

    def started(self, queue: str) -> list[float]:
        with self._lock:
            return list(self.starts.get(queue, []))

    def finished(self, queue: str) -> int:
        with self._lock:
            return len(self.ends.get(queue, []))

    def ended_between(self, queue: str, start: float, end: float) -> int:
        """How many of the queue's jobs ended after ``start`` and up to ``end`` (monotonic times,
        compared only to order events: the count, not the time, is what a test asserts)."""
        with self._lock:
            return sum(1 for t in self.ends.get(queue, []) if start < t <= end)


def enqueue(queue: str, count: int, *, ms: int | None = 100, kind: str = SLEEP_KIND) -> float:
    """Commit ``count`` jobs on ``queue`` in one transaction; return the monotonic time of the commit."""
    args = {} if ms is None else {"ms": ms}
    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": kind, "queue": queue, "args": args} for _ in range(count)])
    return time.monotonic()


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic, taken after the count returned
    running: dict[str, int]
    available: dict[str, int]
    # Permit probe only: the allocator's total_in_flight just before and just after the count.
    in_flight: tuple[int, int] | None = None
    # ... and each queue's in_flight, read in the same callback.
    queue_in_flight: dict[str, int] | None = None
    # Monotonic, taken before the count was sent: a sample that began before a commit may not
    # see it, however late it returned.
    begun: float = -math.inf

    @property
    def total(self) -> int:
        return sum(self.running.values())


COUNT_SQL = """
SELECT queue,
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'available')
FROM awa_job
WHERE queue = ANY(%(queues)s::varchar[]) AND state IN ('running', 'available')
GROUP BY queue
"""


class Sampler:
    """Counts running and available rows per queue every ``interval`` seconds, on its own connection.

    With ``probe_worker`` the count runs as one callback on that worker's event loop, between two
    reads of ``allocator.total_in_flight``: while the callback runs no permit can be taken or
    given back, so ``before == after`` and a running row without a permit cannot hide in the gap.
    """

    def __init__(self, queues: Sequence[str], *, interval: float = 0.015, probe_worker: Worker | None = None) -> None:
        self.queues = list(queues)
        self.interval = interval
        self.probe_worker = probe_worker
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="awa-test-sampler", daemon=True)
        self._conn: psycopg.Connection[Any] | None = None
        self.error: BaseException | None = None

    def __enter__(self) -> Sampler:
        self._conn = connect_outside_django()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        if self._conn is not None:
            self._conn.close()
        if self.error is not None:
            raise self.error

    def snapshot(self) -> list[Sample]:
        with self._lock:
            return list(self.samples)

    def latest(self) -> Sample | None:
        with self._lock:
            return self.samples[-1] if self.samples else None

    def _count(self) -> tuple[dict[str, int], dict[str, int]]:
        assert self._conn is not None
        rows = self._conn.execute(COUNT_SQL, {"queues": self.queues}).fetchall()
        running = dict.fromkeys(self.queues, 0)
        available = dict.fromkeys(self.queues, 0)
        for queue, n_running, n_available in rows:
            running[queue] = n_running
            available[queue] = n_available
        return running, available

    def _probe(self) -> Sample:
        worker = self.probe_worker
        assert worker is not None
        loop = worker.loop  # set by Worker.run() before the worker is ready
        assert loop is not None
        future: concurrent.futures.Future[Sample] = concurrent.futures.Future()

        def on_loop() -> None:
            try:
                begun = time.monotonic()
                before = worker.allocator.total_in_flight
                running, available = self._count()
                after = worker.allocator.total_in_flight
                per_queue = {q: worker.allocator.in_flight(q) for q in self.queues}
                future.set_result(Sample(time.monotonic(), running, available, (before, after), per_queue, begun))
            except BaseException as exc:  # reported by the sampler thread
                future.set_exception(exc)

        loop.call_soon_threadsafe(on_loop)
        return future.result(timeout=30)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.probe_worker is not None:
                    sample = self._probe()
                else:
                    begun = time.monotonic()
                    running, available = self._count()
                    sample = Sample(time.monotonic(), running, available, begun=begun)
                with self._lock:
                    self.samples.append(sample)
                self._stop.wait(self.interval)
        except BaseException as exc:
            self.error = exc

    def wait_for(self, predicate: Callable[[Sample], bool], timeout: float, what: str) -> Sample:
        """The first sample begun from now on that satisfies ``predicate``.

        Begun, not returned: a count sent before the caller's last commit can return after this
        call and still not see that commit (a queue just filled would read as dry).
        """
        now = time.monotonic()
        deadline = now + timeout
        seen = 0
        while True:
            samples = self.snapshot()
            for sample in samples[seen:]:
                if sample.begun >= now and predicate(sample):
                    return sample
            seen = len(samples)
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                last = samples[-1] if samples else None
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; last sample: {last}")
            time.sleep(0.01)


def time_weighted_mean(samples: Sequence[Sample], value: Callable[[Sample], float]) -> float:
    """Mean of ``value`` over time: each sample holds until the next one (the last gets the median step)."""
    if not samples:
        raise AssertionError("no samples to average")
    if len(samples) == 1:
        return value(samples[0])
    steps = [b.t - a.t for a, b in itertools.pairwise(samples)]
    steps.append(sorted(steps)[len(steps) // 2])
    total = sum(steps)
    return sum(value(s) * w for s, w in zip(samples, steps, strict=True)) / total


def between(samples: Iterable[Sample], start: float, end: float = math.inf) -> list[Sample]:
    return [s for s in samples if start <= s.t <= end]


def contended(samples: Iterable[Sample], queues: Sequence[str]) -> list[Sample]:
    """The samples from the first to the last one at which every queue still had available rows."""
    samples = list(samples)
    loaded = [i for i, s in enumerate(samples) if all(s.available[q] > 0 for q in queues)]
    if not loaded:
        return []
    return samples[loaded[0] : loaded[-1] + 1]


def wait_all_finished(queues: Iterable[str], timeout: float = 60.0) -> None:
    """Every job of the queues reached a terminal state (and none failed)."""
    from tests.harness import wait_until

    queues = list(queues)
    unfinished = Job.objects.filter(queue__in=queues).exclude(state__in=["completed", "failed", "cancelled"])
    wait_until(
        lambda: not unfinished.exists(),
        timeout=timeout,
        interval=0.05,
        what=f"every job of {queues} finished",
    )


# Time-averaged running counts of loaded queues sit under their ideal: each completion leaves
# its slot empty for one write-to-claim round trip, and that trip grows with the machine's load
# (about 0.5 below the ideal at rest, 1.6 below under a load of 6 on 2 cores). The counts may
# therefore fall up to SPLIT_BELOW under the ideal, and exceed it by at most SPLIT_ABOVE. The
# gaps cost every queue the same fraction of its count, so the proportion A / (A + B) is
# unbiased and held tightly, to SHARE_TOLERANCE: that is what tells 17:7 (0.708) apart from
# 18:6 (0.75), 16:8 (0.667), an even split (0.5) or B on its floor alone (22:2, 0.917).
SPLIT_BELOW = 2.5
SPLIT_ABOVE = 0.5
SHARE_TOLERANCE = 0.04


def split_problems(mean_a: float, mean_b: float, ideal_a: int, ideal_b: int) -> list[str]:
    """What is wrong with a measured running split (empty when it is close enough to the ideal)."""
    problems = []
    for name, mean, ideal in (("A", mean_a, ideal_a), ("B", mean_b, ideal_b)):
        if not ideal - SPLIT_BELOW <= mean <= ideal + SPLIT_ABOVE:
            problems.append(f"{name} averaged {mean:.2f} running, ideal {ideal} (-{SPLIT_BELOW}/+{SPLIT_ABOVE})")
    share, ideal_share = mean_a / (mean_a + mean_b), ideal_a / (ideal_a + ideal_b)
    if abs(share - ideal_share) > SHARE_TOLERANCE:
        problems.append(f"A ran {share:.3f} of the total, ideal {ideal_share:.3f} (±{SHARE_TOLERANCE})")
    return problems
