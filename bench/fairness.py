"""Fairness of the weighted pool, measured on a real worker and a real Postgres.

    python bench/fairness.py [--keys-only | --queues-only]

Five queue scenarios, each on a fresh worker, printed as one table (ideal, measured, error), then
the fair-key scenarios of bench/fair_keys.py (one queue's slots among its keys: flood plus
newcomer, weights 1:2:5, a cap beside an uncapped key, 100 equal keys), measured from the rows:

* A (min_workers 2, weight 3) and B (min_workers 2, weight 1), global maximum 24: the overflow
  pool of 20 splits 15:5, so the ideal running split is 17:7. A is loaded alone first and takes
  its 2 slots plus the whole pool; then B is loaded.
* A weight 10 holds a pool of 10, then a weight-1 B arrives: B's ideal is 10/11 = 0.91.
* Five equal queues share a pool of 4: 0.8 each.
* B beside an empty A (pool 10): B should run 10.
* B beside A rate-limited to 2 jobs/s of 100 ms (pool 10): A uses 0.2, B 9.8.

Averages are over a 5 s window starting 0.5 s after the last queue was loaded, while every
loaded queue still has available jobs; "first job after commit" is how long a late queue took
from its enqueue commit to its first running row.

Concurrency is read from the database (``state='running'`` rows per queue, sampled every ~15 ms
on a separate connection), never from the worker's own counters. Jobs are async handlers that
sleep 150 ms (the first scenario) or 100 ms. With DATABASE_URL unset the embedded PostgreSQL
of testproject is used, in a database of its own (``awa_bench_fairness``, created and migrated on first use); with
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
KIND = "bench.fairness.sleep"
SAMPLE_INTERVAL = 0.015
WARM_UP = 0.5  # seconds after the last queue arrived before running counts are averaged
WINDOW = 5.0  # seconds averaged in the edge scenarios
TIMEOUT = 45.0  # each scenario stays under a minute


@dataclass(frozen=True)
class Spec:
    """One queue of a scenario: its settings, how many jobs it gets, and when."""

    name: str
    jobs: int
    weight: int = 1
    min_workers: int = 0
    rate_limit: float | None = None
    late: bool = False  # enqueued once the others hold the whole pool


@dataclass(frozen=True)
class Scenario:
    title: str
    global_max: int
    specs: tuple[Spec, ...]
    ideal: dict[str, float]  # the time-averaged running count each queue should reach
    job_ms: int = 100


SCENARIOS = (
    Scenario(
        "A 3 / B 1, min 2 each, G=24, 150 ms",
        24,
        (Spec("fair_a", 1000, weight=3, min_workers=2), Spec("fair_b", 420, min_workers=2, late=True)),
        {"fair_a": 17, "fair_b": 7},
        job_ms=150,
    ),
    Scenario(
        "weight-1 newcomer beside weight 10, G=10",
        10,
        (Spec("new_a", 1200, weight=10), Spec("new_b", 200, late=True)),
        {"new_a": 100 / 11, "new_b": 10 / 11},
    ),
    Scenario(
        "five equal queues, G=4",
        4,
        tuple(Spec(f"five_{i}", 150) for i in range(1, 6)),
        {f"five_{i}": 0.8 for i in range(1, 6)},
    ),
    Scenario(
        "B beside an empty queue, G=10",
        10,
        (Spec("empty_a", 0), Spec("empty_b", 700)),
        {"empty_a": 0, "empty_b": 10},
    ),
    Scenario(
        "B beside A rate-limited to 2/s, G=10",
        10,
        (Spec("rate_a", 100, rate_limit=2.0), Spec("rate_b", 700)),
        {"rate_a": 0.2, "rate_b": 9.8},
    ),
)


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    if not os.environ.get("DATABASE_URL"):
        os.environ["AWA_DB_NAME"] = os.environ.get("AWA_BENCH_DB", BENCH_DB)  # two benchmarks at once
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

    from testproject.embedded import socket_dir

    host = db["HOST"] or socket_dir()  # the embedded backend fills HOST in only on first connection
    with psycopg.connect(dbname="postgres", user=db["USER"], host=host, autocommit=True) as conn:
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

    def __init__(self, queues: list[str]) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        from django.db import connection

        self.params = {
            k: v
            for k, v in connection.get_connection_params().items()
            if k not in ("cursor_factory", "context", "prepare_threshold")
        }
        self.queues = queues
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self.halt = threading.Event()

    def run(self) -> None:
        import psycopg

        queues = self.queues
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


def _clean(queues: list[str]) -> None:
    from awa_django.models import Job, Queue

    Job.objects.filter(queue__in=queues).delete()
    Queue.objects.filter(name__in=queues).delete()


def _enqueue(queue: str, count: int, job_ms: int) -> float:
    from django.db import transaction

    from awa_django.models import Job

    with transaction.atomic():
        Job.objects.enqueue_many([{"kind": KIND, "queue": queue, "args": {"ms": job_ms}} for _ in range(count)])
    return time.monotonic()


def _start_worker(scenario: Scenario, **overrides: float) -> tuple[Any, threading.Thread, dict[str, Any]]:
    """An in-process worker for the scenario's queues; ``overrides`` are WorkerConfig fields."""
    from awa_django.models import Queue
    from awa_django.registry import JobHandler, Registry
    from awa_django.worker import QueueConfig, Worker, WorkerConfig

    async def sleep(ms: int) -> None:
        await asyncio.sleep(ms / 1000)

    registry = Registry()
    registry.register(JobHandler(KIND, sleep))
    configs = {}
    for spec in scenario.specs:
        Queue.objects.create(
            name=spec.name, min_workers=spec.min_workers, weight=spec.weight, rate_limit=spec.rate_limit
        )
        configs[spec.name] = QueueConfig(
            spec.name, min_workers=spec.min_workers, weight=spec.weight, rate_limit=spec.rate_limit
        )
    config = WorkerConfig(
        queues=configs,
        global_max_workers=scenario.global_max,
        poll_interval=0.2,
        shutdown_timeout=5.0,
        fixed_queues=True,  # serve only these queues, whatever other Queue rows exist
        **overrides,
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


@dataclass
class Outcome:
    scenario: Scenario
    means: dict[str, float]
    mean_total: float
    peak: int
    window: float
    first_start: dict[str, float]  # late queues: seconds from commit to their first running job


def run_scenario(scenario: Scenario) -> Outcome:
    queues = [spec.name for spec in scenario.specs]
    _clean(queues)
    sampler = Sampler(queues)
    sampler.start()
    worker, thread, box = _start_worker(scenario)
    first_start: dict[str, float] = {}
    try:
        early = [spec for spec in scenario.specs if not spec.late]
        for spec in early:
            if spec.jobs:
                _enqueue(spec.name, spec.jobs, scenario.job_ms)
        start = time.monotonic()
        late = [spec for spec in scenario.specs if spec.late]
        if late:
            reachable = scenario.global_max - sum(spec.min_workers for spec in late)  # late floors stay free
            sampler.wait_for(lambda s: s.total == reachable, "the early queues to fill the pool")
            for spec in late:
                committed = _enqueue(spec.name, spec.jobs, scenario.job_ms)
                name = spec.name
                seen = sampler.wait_for(lambda s, name=name: s.running[name] > 0, f"{name} to start")
                first_start[name] = seen.t - committed
            start = committed
        sampler.wait_for(lambda s: s.t >= start + WARM_UP + WINDOW, "the measuring window to pass")
    finally:
        sampler.halt.set()
        sampler.join(10)
        worker.request_stop_threadsafe()
        thread.join(30)
        _clean(queues)
    if "error" in box:
        raise box["error"]
    samples = sampler.snapshot()
    loaded = [spec.name for spec in scenario.specs if spec.jobs]
    window = [
        s
        for s in samples
        if start + WARM_UP <= s.t <= start + WARM_UP + WINDOW and all(s.available[q] > 0 for q in loaded)
    ]
    if len(window) < 10:
        raise SystemExit(f"{scenario.title}: only {len(window)} samples with every queue loaded: too few to average")
    return Outcome(
        scenario,
        {q: _time_weighted_mean(window, lambda s, q=q: s.running[q]) for q in queues},
        _time_weighted_mean(window, lambda s: s.total),
        max(s.total for s in samples),
        window[-1].t - window[0].t,
        first_start,
    )


def main() -> int:
    _setup_django()
    if "--keys-only" in sys.argv:
        return _print_key_scenarios()
    outcomes = [run_scenario(scenario) for scenario in SCENARIOS]
    print("| scenario | queue | ideal running | measured | error | first job after commit |")
    print("|---|---|---:|---:|---:|---:|")
    failed = False
    for outcome in outcomes:
        scenario = outcome.scenario
        for spec in scenario.specs:
            ideal, measured = scenario.ideal[spec.name], outcome.means[spec.name]
            error = f"{(measured - ideal) / ideal:+.1%}" if ideal else f"{measured:+.2f}"
            started = f"{outcome.first_start[spec.name] * 1000:.0f} ms" if spec.name in outcome.first_start else ""
            print(f"| {scenario.title} | {spec.name} | {ideal:.2f} | {measured:.2f} | {error} | {started} |")
        print(
            f"| {scenario.title} | total | {scenario.global_max} | {outcome.mean_total:.2f} | "
            f"peak {outcome.peak} | over {outcome.window:.1f} s |"
        )
        if outcome.peak > scenario.global_max:
            print(f"ERROR: {outcome.peak} jobs ran at once in {scenario.title!r}, above {scenario.global_max}")
            failed = True
    if "--queues-only" not in sys.argv:
        print()
        _print_key_scenarios()
    return 1 if failed else 0


def _print_key_scenarios() -> int:
    from bench.fair_keys import run_key_scenarios

    print("\n".join(run_key_scenarios()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
