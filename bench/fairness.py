"""Fairness of the weighted pool, measured on a real worker and a real Postgres.

    python bench/fairness.py

Queues A (min_workers 2, weight 3) and B (min_workers 2, weight 1) share a global maximum of
24: the overflow pool of 20 splits 15:5, so the ideal running split is 17:7. A is loaded alone
first and takes its 2 slots plus the whole pool (22); then B is loaded. Printed: how long B took
from its enqueue commit to running its share of 7 (the design's bound is 2 s), the time-averaged
running split while both queues had available jobs, the largest total ever running against the
global maximum, and the mean total.

Concurrency is read from the database (``state='running'`` rows per queue, sampled every ~15 ms
on a separate connection), never from the worker's own counters. Jobs are async handlers that
sleep 150 ms. With DATABASE_URL unset the embedded PostgreSQL of testproject is used, in a
database of its own (``awa_bench_fairness``, created and migrated on first use); with
DATABASE_URL set, only this benchmark's queues' rows are written and removed there.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

BENCH_DB = "awa_bench_fairness"
QUEUE_A, QUEUE_B = "bench_fair_a", "bench_fair_b"
GLOBAL_MAX = 24
IDEAL = {QUEUE_A: 17, QUEUE_B: 7}
JOB_MS = 150
JOBS = {QUEUE_A: 1000, QUEUE_B: 420}  # about 8 s of contention at the ideal split
KIND = "bench.fairness.sleep"
SAMPLE_INTERVAL = 0.015
WARM_UP = 0.5  # seconds after B first reaches its share before the split is averaged
TIMEOUT = 45.0  # the whole run stays under a minute


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    if not os.environ.get("DATABASE_URL"):
        os.environ["AWA_DB_NAME"] = BENCH_DB
    import django
    from django.conf import settings

    django.setup()
    if not os.environ.get("DATABASE_URL"):
        _create_database(settings.DATABASES["default"])
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    logging.getLogger("awa_django").setLevel(logging.WARNING)


def _create_database(db: dict[str, Any]) -> None:
    """Create the benchmark's own database on the embedded server, once."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dbname="postgres", user=db["USER"], host=db["HOST"], autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db["NAME"],)).fetchone() is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db["NAME"])))


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic, after the count returned
    running: dict[str, int]
    available: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.running.values())


class Sampler(threading.Thread):
    """Counts running and available rows per queue on its own connection."""

    def __init__(self) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        from django.db import connection

        self.params = {
            k: v
            for k, v in connection.get_connection_params().items()
            if k not in ("cursor_factory", "context", "prepare_threshold")
        }
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self.halt = threading.Event()

    def run(self) -> None:
        import psycopg

        queues = [QUEUE_A, QUEUE_B]
        with psycopg.connect(**self.params, autocommit=True) as conn:
            while not self.halt.is_set():
                rows = conn.execute(
                    "SELECT queue, count(*) FILTER (WHERE state = 'running'), "
                    "count(*) FILTER (WHERE state = 'available') FROM awa_job "
                    "WHERE queue = ANY(%s) AND state IN ('running', 'available') GROUP BY queue",
                    (queues,),
                ).fetchall()
                running, available = dict.fromkeys(queues, 0), dict.fromkeys(queues, 0)
                for queue, n_running, n_available in rows:
                    running[queue], available[queue] = n_running, n_available
                with self.lock:
                    self.samples.append(Sample(time.monotonic(), running, available))
                self.halt.wait(SAMPLE_INTERVAL)

    def snapshot(self) -> list[Sample]:
        with self.lock:
            return list(self.samples)

    def wait_for(self, predicate: Callable[[Sample], bool], what: str, timeout: float = TIMEOUT) -> Sample:
        """The first sample taken from now on that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        seen = len(self.snapshot())
        while time.monotonic() < deadline:
            samples = self.snapshot()
            for sample in samples[seen:]:
                if predicate(sample):
                    return sample
            seen = len(samples)
            time.sleep(0.01)
        raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def _time_weighted_mean(samples: list[Sample], key: Callable[[Sample], float]) -> float:
    steps = [b.t - a.t for a, b in itertools.pairwise(samples)]
    steps.append(sorted(steps)[len(steps) // 2] if steps else 1.0)
    return sum(key(s) * w for s, w in zip(samples, steps, strict=True)) / sum(steps)


def _clean() -> None:
    from awa_django.models import Job, Queue

    Job.objects.filter(queue__in=[QUEUE_A, QUEUE_B]).delete()
    Queue.objects.filter(name__in=[QUEUE_A, QUEUE_B]).delete()


def _enqueue(queue: str, count: int) -> float:
    from django.db import transaction

    from awa_django.models import Job

    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": KIND, "queue": queue, "args": {"ms": JOB_MS}} for _ in range(count)])
    return time.monotonic()


def _start_worker() -> tuple[Any, threading.Thread, dict[str, Any]]:
    from awa_django.models import Queue
    from awa_django.registry import JobHandler, Registry
    from awa_django.worker import QueueConfig, Worker, WorkerConfig

    async def sleep(ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    registry = Registry()
    registry.register(JobHandler(KIND, sleep))
    Queue.objects.create(name=QUEUE_A, min_workers=2, weight=3)
    Queue.objects.create(name=QUEUE_B, min_workers=2, weight=1)
    config = WorkerConfig(
        queues={
            QUEUE_A: QueueConfig(QUEUE_A, min_workers=2, weight=3),
            QUEUE_B: QueueConfig(QUEUE_B, min_workers=2, weight=1),
        },
        global_max_workers=GLOBAL_MAX,
        poll_interval=0.2,
        shutdown_timeout=5.0,
        fixed_queues=True,  # serve only these queues, whatever other Queue rows exist
    )
    worker = Worker(config, registry=registry)
    box: dict[str, Any] = {}
    ready = threading.Event()

    def main() -> None:
        async def go() -> None:
            waiter = asyncio.create_task(worker.ready.wait())
            waiter.add_done_callback(lambda _: ready.set())
            await worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:  # reported by the caller
            box["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=main, name="bench-worker", daemon=True)
    thread.start()
    ready.wait(30)
    if "error" in box:
        raise box["error"]
    return worker, thread, box


def main() -> int:
    _setup_django()
    _clean()
    sampler = Sampler()
    sampler.start()
    worker, thread, box = _start_worker()
    try:
        _enqueue(QUEUE_A, JOBS[QUEUE_A])
        sampler.wait_for(lambda s: s.running[QUEUE_A] == IDEAL[QUEUE_A] + 5, "A to hold the whole pool (22)")
        committed = _enqueue(QUEUE_B, JOBS[QUEUE_B])
        converged = sampler.wait_for(lambda s: s.running[QUEUE_B] >= IDEAL[QUEUE_B], "B to reach its share")
        sampler.wait_for(lambda s: s.available[QUEUE_A] == 0 or s.available[QUEUE_B] == 0, "a queue to run dry")
    finally:
        sampler.halt.set()
        sampler.join(10)
        worker.request_stop_threadsafe()
        thread.join(30)
        _clean()
    if "error" in box:
        raise box["error"]

    samples = sampler.snapshot()
    window = [
        s for s in samples if s.t >= converged.t + WARM_UP and s.available[QUEUE_A] > 0 and s.available[QUEUE_B] > 0
    ]
    if len(window) < 10:
        raise SystemExit(f"only {len(window)} samples with both queues loaded: too few to average")
    mean_a = _time_weighted_mean(window, lambda s: s.running[QUEUE_A])
    mean_b = _time_weighted_mean(window, lambda s: s.running[QUEUE_B])
    mean_total = _time_weighted_mean(window, lambda s: s.total)
    peak = max(s.total for s in samples)
    print(f"fairness: A (min 2, weight 3) vs B (min 2, weight 1), global_max_workers {GLOBAL_MAX}, {JOB_MS} ms jobs")
    print(
        f"  running split, time-averaged over {window[-1].t - window[0].t:.2f}s with both loaded "
        f"({len(window)} samples): {mean_a:.2f} : {mean_b:.2f}   ideal {IDEAL[QUEUE_A]} : {IDEAL[QUEUE_B]}"
    )
    print(f"  largest total running: {peak} / {GLOBAL_MAX} (global maximum)")
    print(f"  mean total running:    {mean_total:.2f} / {GLOBAL_MAX}")
    print(
        f"  convergence: B reached its share of {IDEAL[QUEUE_B]} running {(converged.t - committed) * 1000:.0f} ms "
        "after its enqueue committed (bound: 2000 ms)"
    )
    if peak > GLOBAL_MAX:
        print(f"  ERROR: {peak} jobs ran at once, above the global maximum of {GLOBAL_MAX}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
