"""Fair keys: what they cost a drain, and what each key gets, on a real worker and a real Postgres.

    python bench/fair_keys.py [--jobs N] [--keys K] [--slots S]

Two parts, printed as tables:

* **Drain**: N no-op jobs drained by one in-process worker (``max_workers`` S), three ways: the
  jobs with no key (the plain claim, claim_jobs), the same jobs over K keys (the keyed claim:
  discovery, ``KeyShares``, claim_keyed_jobs), and over K keys with a cap of S per key (the capped
  path: advisory locks and running counts in each claim's transaction, though no cap binds).
  Jobs per second from the first attempt to the last write, by the database's clock.
* **Shares** (``run_key_scenarios``, also run by bench/fairness.py): one queue, keys with weights
  and caps, 100 ms jobs; each key's share of the slot-seconds while every key still has jobs,
  rebuilt from the rows ([attempted_at, finalized_at) per attempt), against its water-fill share.

The embedded PostgreSQL of testproject is used, in the database bench/fairness.py uses.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the checkout importable
    sys.path.insert(0, str(ROOT))

from bench.fairness import _setup_django  # noqa: E402

QUEUE = "bench_keys"
SLEEP_KIND = "bench.keys.sleep"
NOOP_KIND = "bench.keys.noop"


def _insert(n: int, keys: int, kind: str, ms: int = 0) -> None:
    """``n`` due jobs, key ``k<i mod keys>`` (no key when ``keys`` is 0), in one statement."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job (kind, queue, fair_key, args, state, priority, attempt, max_attempts, run_at,"
            " created_at, errors, metadata, tags, run_lease)"
            " SELECT %s, %s, CASE WHEN %s = 0 THEN '' ELSE 'k' || (g %% GREATEST(%s, 1)) END,"
            " jsonb_build_object('ms', %s::int), 'available', 2, 0, 25, now(), now(), '[]', '{}', '{}', 0"
            " FROM generate_series(1, %s) AS g",
            [kind, QUEUE, keys, keys, ms, n],
        )


def _clean() -> None:
    from awa_django.models import FairKey, Job, Queue

    Job.objects.filter(queue=QUEUE).delete()
    Queue.objects.filter(name=QUEUE).delete()
    FairKey.objects.filter(queue=QUEUE).delete()


class _Worker:
    """An in-process worker serving QUEUE with ``slots`` slots, in a thread of its own."""

    def __init__(self, slots: int) -> None:
        from awa_django.registry import JobHandler, Registry
        from awa_django.worker import QueueConfig, Worker, WorkerConfig

        async def noop(ms: int = 0) -> None:
            return None

        async def sleep(ms: int) -> None:
            await asyncio.sleep(ms / 1000)

        registry = Registry()
        registry.register(JobHandler(NOOP_KIND, noop))
        registry.register(JobHandler(SLEEP_KIND, sleep))
        config = WorkerConfig(
            queues={QUEUE: QueueConfig(QUEUE, max_workers=slots)},
            poll_interval=0.2,
            shutdown_timeout=5.0,
            fixed_queues=True,
        )
        self.worker = Worker(config, registry=registry)
        self.box: dict[str, Any] = {}
        ready = threading.Event()

        def main() -> None:
            async def go() -> None:
                waiter = asyncio.create_task(self.worker.ready.wait())
                waiter.add_done_callback(lambda _: ready.set())
                await self.worker.run()

            try:
                asyncio.run(go())
            except BaseException as exc:  # reported by stop()
                self.box["error"] = exc
            finally:
                ready.set()

        self.thread = threading.Thread(target=main, name="bench-keys-worker", daemon=True)
        self.thread.start()
        ready.wait(30)

    def stop(self) -> None:
        self.worker.request_stop_threadsafe()
        self.thread.join(30)
        if "error" in self.box:
            raise self.box["error"]


def _wait_done(n: int, timeout: float = 600.0) -> None:
    from awa_django.models import Job

    deadline = time.monotonic() + timeout
    while Job.objects.filter(queue=QUEUE, state="completed").count() < n:
        failed = Job.objects.filter(queue=QUEUE, state="failed").first()
        if failed is not None:
            raise SystemExit(f"a bench job failed: {failed.errors}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {n} jobs")
        time.sleep(0.2)


def _rate() -> float:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), EXTRACT(EPOCH FROM max(finalized_at) - min(attempted_at)) FROM awa_job WHERE queue = %s",
            [QUEUE],
        )
        n, seconds = cursor.fetchone()
    return float(n) / float(seconds)


def drain(n: int, keys: int, slots: int, *, capped: bool = False) -> float:
    from awa_django.models import Queue

    _clean()
    Queue.objects.create(name=QUEUE, max_workers=slots, key_max_running=slots if capped else None)
    _insert(n, keys, NOOP_KIND)
    worker = _Worker(slots)
    try:
        _wait_done(n)
    finally:
        worker.stop()
    rate = _rate()
    _clean()
    return rate


@dataclass(frozen=True)
class KeyScenario:
    title: str
    slots: int
    keys: dict[str, tuple[int, int | None, int]]  # key -> (weight, cap, jobs)
    job_ms: int = 100
    late: str | None = None  # enqueued once the others run


KEY_SCENARIOS = (
    KeyScenario("flood A + newcomer B, 4 slots", 4, {"A": (1, None, 600), "B": (1, None, 60)}, late="B"),
    KeyScenario("weights 1:2:5, 8 slots", 8, {"w1": (1, None, 80), "w2": (2, None, 160), "w5": (5, None, 400)}),
    KeyScenario("cap 2 beside an uncapped key, 6 slots", 6, {"capped": (1, 2, 100), "free": (1, None, 300)}),
    KeyScenario("100 equal keys, 10 slots", 10, {f"t{i}": (1, None, 8) for i in range(100)}),
)


def run_key_scenarios() -> list[str]:
    """Each key scenario's table rows: ideal share, measured share, error (and first start)."""
    from django.db import transaction

    from awa_django.concurrency.keys import water_fill
    from awa_django.models import FairKey, Job, Queue
    from tests.worker.fairkeys import add_jobs, all_backlogged_until, ran, shares

    lines = [
        "| key scenario | key | ideal share | measured | error | first job after commit |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for scenario in KEY_SCENARIOS:
        _clean()
        Queue.objects.create(name=QUEUE, max_workers=scenario.slots)
        for key, (weight, cap, _) in scenario.keys.items():
            if weight != 1 or cap is not None:
                FairKey.objects.create(queue=QUEUE, key=key, weight=weight, max_running=cap)
        worker = _Worker(scenario.slots)
        total = sum(jobs for _, _, jobs in scenario.keys.values())
        try:
            with transaction.atomic():
                # Interleaved by key: the worker's first claim, before it has seen a key, is in
                # plain (priority, run_at, id) order, and takes the first jobs whatever their keys.
                early = [(key, jobs) for key, (_, _, jobs) in scenario.keys.items() if key != scenario.late]
                for round_ in range(max(jobs for _, jobs in early)):
                    for key, jobs in early:
                        if round_ < jobs:
                            add_jobs(QUEUE, key, 1, kind=SLEEP_KIND, seconds=0)
                Job.objects.filter(queue=QUEUE).update(args={"ms": scenario.job_ms})
            if scenario.late is not None:
                time.sleep(1.0)  # the others hold every slot by now
                with transaction.atomic():
                    add_jobs(QUEUE, scenario.late, scenario.keys[scenario.late][2], kind=SLEEP_KIND, seconds=0)
                    Job.objects.filter(queue=QUEUE, fair_key=scenario.late).update(args={"ms": scenario.job_ms})
            _wait_done(total)
        finally:
            worker.stop()
        runs = ran(QUEUE)
        since = runs[0].start
        first: dict[str, float] = {}
        if scenario.late is not None:
            late_runs = [r for r in runs if r.key == scenario.late]
            since = late_runs[0].start
            committed = Job.objects.filter(queue=QUEUE, fair_key=scenario.late).earliest("created_at").created_at
            first[scenario.late] = (late_runs[0].start - committed).total_seconds()
        got = shares(runs, since, all_backlogged_until(runs, list(scenario.keys)))
        ideal = water_fill(
            float(scenario.slots),
            {k: w for k, (w, _, _) in scenario.keys.items()},
            {k: c for k, (_, c, _) in scenario.keys.items()},
        )
        total_ideal = sum(ideal.values())
        errors = []
        for key in scenario.keys:
            want, measured = ideal[key] / total_ideal, got.get(key, 0.0)
            errors.append(abs(measured - want) / want)
            if len(scenario.keys) <= 4:
                started = f"{first[key] * 1000:.0f} ms" if key in first else ""
                error = (measured - want) / want
                lines.append(f"| {scenario.title} | {key} | {want:.3f} | {measured:.3f} | {error:+.1%} | {started} |")
        if len(scenario.keys) > 4:
            lines.append(
                f"| {scenario.title} | each of {len(scenario.keys)} | {1 / len(scenario.keys):.3f} | "
                f"mean error {sum(errors) / len(errors):.1%} | max {max(errors):.1%} | |"
            )
        _clean()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--slots", type=int, default=50)
    parser.add_argument("--skip-shares", action="store_true")
    args = parser.parse_args()
    _setup_django()
    rows = [
        ("no key (claim_jobs)", drain(args.jobs, 0, args.slots)),
        (f"{args.keys} keys (claim_keyed_jobs)", drain(args.jobs, args.keys, args.slots)),
        (
            f"{args.keys} keys, capped at {args.slots} (locks + counts)",
            drain(args.jobs, args.keys, args.slots, capped=True),
        ),
    ]
    base = rows[0][1]
    print(f"| drain of {args.jobs} no-op jobs, {args.slots} slots | jobs/s | vs no key |")
    print("|---|---:|---:|")
    for title, rate in rows:
        print(f"| {title} | {rate:,.0f} | {rate / base:.2f}x |")
    if not args.skip_shares:
        print()
        print("\n".join(run_key_scenarios()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
