"""Fair keys: what they cost a drain, a pickup and a drain under an old snapshot, and what each
key gets, on real ``awa_worker`` processes and a real Postgres.

    python bench/fair_keys.py [--jobs N] [--keys K] [--slots S] [--main DIR]
                              [--pickups P] [--snapshot-jobs M] [--skip-shares]

Printed as tables, every comparison side by side in one run:

* **Drain**: N no-op jobs drained by one ``awa_worker`` process (the queue's ``max_workers`` S),
  each way in its own process: the jobs with no key (the plain claim, claim_jobs), the same jobs
  over K keys (the keyed claim: discovery, ``KeyShares``, claim_keyed_jobs), over K keys with a cap
  of S per key (the capped path: advisory locks and running counts, though no cap binds; skipped
  with ``--no-capped``), and, with ``--main DIR`` (a checkout of main, e.g. ``git archive main |
  tar -x -C DIR``), the jobs with no key on main's code. Jobs per second from the first attempt to
  the last write, by the database's clock (no process start-up in it).
* **Pickup** (``--pickups P``, bench/pickup_tail.py's method): one idle worker; P jobs enqueued one
  at a time (autocommit) after a random 20-60 ms gap, with no key and then each on one of 100 keys,
  alternating in blocks; pickup is ``attempted_at - run_at`` from each row (NOTIFY, wake-up, claim).
* **Old snapshot** (``--snapshot-jobs M``, bench/mvcc.py's method): M jobs over K keys drained with
  no snapshot held and then while another connection holds a REPEATABLE READ snapshot taken
  before the drain (vacuum can remove nothing the drain leaves behind).
* **Shares** (``run_key_scenarios``, also run by bench/fairness.py): one queue, keys with weights
  and caps, 100 ms jobs; each key's share of the slot-seconds while every key still has jobs,
  rebuilt from the rows ([attempted_at, finalized_at) per attempt), against its water-fill share.

The embedded PostgreSQL of testproject is used (its data directory is shared with a ``--main``
worker through AWA_PGDATA), in the database bench/fairness.py uses.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
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
from bench.mvcc import stop_worker  # noqa: E402

QUEUE = "bench_keys"
SLEEP_KIND = "bench.keys.sleep"
NOOP_KIND = "bench.keys.noop"
PROCESS_KIND = "noop"  # testproject's, which a worker process of either checkout runs
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_fair_keys_worker.log"


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
            "SELECT count(*), EXTRACT(EPOCH FROM max(finalized_at) - min(attempted_at)) "
            "FROM awa_job_all WHERE queue = %s",
            [QUEUE],
        )
        n, seconds = cursor.fetchone()
    return float(n) / float(seconds)


def _start_process(root: Path) -> subprocess.Popen[bytes]:
    """``awa_worker -q QUEUE`` of the checkout at ``root``, on this benchmark's database."""
    from django.conf import settings

    env = dict(os.environ, PYTHONPATH=str(root), AWA_DB_NAME=settings.DATABASES["default"]["NAME"])
    if not os.environ.get("DATABASE_URL"):
        from testproject.embedded import DATA_DIR

        env["AWA_PGDATA"] = str(DATA_DIR)  # a --main checkout uses this server, not one of its own
    with open(WORKER_LOG, "ab") as log:
        return subprocess.Popen(
            [sys.executable, str(root / "manage.py"), "awa_worker", "-q", QUEUE],
            env=env,
            cwd=root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _vacuum() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE awa_job")


def _wait_done_counted(n: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until n jobs are completed. Counting rows competes with the worker for the cores, so the
    statistics counter of updates (a claim and a completion per job) says when to count."""
    from django.db import connection

    def updates() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'awa_job'")
            return int(cursor.fetchone()[0])

    before = updates()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited ({proc.returncode}); see {WORKER_LOG}")
        if updates() - before >= 2 * n:
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM awa_job_all WHERE queue = %s AND state = 'completed'", [QUEUE])
                if int(cursor.fetchone()[0]) >= n:
                    return
        time.sleep(0.5)
    raise SystemExit(f"the drain of {n} jobs did not finish within {timeout:.0f} s")


class _OldSnapshot:
    """A second connection holding one REPEATABLE READ snapshot taken now, until closed."""

    def __init__(self) -> None:
        import psycopg
        from django.db import connection

        from tests.conftest import connection_params

        connection.ensure_connection()
        self.conn = psycopg.connect(**connection_params())
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM awa_job").fetchone()

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


def drain(
    n: int, keys: int, slots: int, *, capped: bool = False, root: Path = ROOT, old_snapshot: bool = False
) -> float:
    """Jobs per second of one worker process (of the checkout at ``root``) draining n no-op jobs
    over ``keys`` keys (0: no key)."""
    from awa_django.models import Queue

    _clean()
    _vacuum()
    Queue.objects.create(name=QUEUE, max_workers=slots, key_max_running=slots if capped else None)
    _insert(n, keys, PROCESS_KIND)
    _vacuum()  # the inserts' visibility map, as a backlog that waited a while has it
    snapshot = _OldSnapshot() if old_snapshot else None
    worker = _start_process(root)
    try:
        _wait_done_counted(n, worker, timeout=max(300.0, n / 100))
    finally:
        stop_worker(worker)
        if snapshot is not None:
            snapshot.close()
    rate = _rate()
    _clean()
    return rate


def pickups(samples: int, keys: int, block: int = 50) -> tuple[list[float], list[float]]:
    """Pickup milliseconds (``attempted_at - run_at``) of one idle worker, with no key and with one
    of ``keys`` keys per job, in alternating blocks of ``block`` jobs."""
    from django.db import connection

    from awa_django.models import Job

    _clean()
    worker = _start_process(ROOT)
    plain: list[float] = []
    keyed: list[float] = []
    try:
        for _ in range(3):  # warm-up: the worker is up and listening once these are done
            Job.objects.enqueue(PROCESS_KIND, queue=QUEUE, fair_key="k0")
        deadline = time.monotonic() + 60
        while Job.objects.filter(queue=QUEUE, state="completed").count() < 3:
            if time.monotonic() > deadline or worker.poll() is not None:
                raise SystemExit(f"the worker did not start; see {WORKER_LOG}")
            time.sleep(0.05)
        ids: dict[bool, list[int]] = {False: [], True: []}
        for i in range(2 * samples):
            with_key = (i // block) % 2 == 1
            time.sleep(random.uniform(0.02, 0.06))
            job = Job.objects.enqueue(PROCESS_KIND, queue=QUEUE, fair_key=f"k{i % keys}" if with_key else "")
            ids[with_key].append(job.pk)
        deadline = time.monotonic() + 60
        while Job.objects.filter(queue=QUEUE, attempted_at__isnull=True).exists():
            if time.monotonic() > deadline:
                raise SystemExit("pickup jobs left unclaimed")
            time.sleep(0.05)
        with connection.cursor() as cursor:
            for with_key, out in ((False, plain), (True, keyed)):
                cursor.execute(
                    "SELECT extract(epoch FROM attempted_at - run_at) * 1000 FROM awa_job_all WHERE id = ANY(%s)",
                    [ids[with_key]],
                )
                out.extend(float(ms) for (ms,) in cursor.fetchall())
    finally:
        stop_worker(worker)
    _clean()
    return plain, keyed


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


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

    from awa_django.concurrency.waterfill import water_fill
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
    parser.add_argument("--main", type=Path, help="a checkout of main: also drain with no key on its code")
    parser.add_argument("--no-capped", action="store_true", help="skip the capped drain")
    parser.add_argument("--pickups", type=int, default=0, help="pickup samples each way (0: skip)")
    parser.add_argument("--snapshot-jobs", type=int, default=0, help="keyed drain under an old snapshot (0: skip)")
    parser.add_argument("--skip-shares", action="store_true")
    args = parser.parse_args()
    _setup_django()
    if args.jobs:
        rows = [("no key (claim_jobs)", drain(args.jobs, 0, args.slots))]
        rows.append((f"{args.keys:,} keys (claim_keyed_jobs)", drain(args.jobs, args.keys, args.slots)))
        if not args.no_capped:
            rows.append(
                (
                    f"{args.keys:,} keys, capped at {args.slots} (locks + counts)",
                    drain(args.jobs, args.keys, args.slots, capped=True),
                )
            )
        if args.main is not None:
            rows.append(("no key, main's code", drain(args.jobs, 0, args.slots, root=args.main.resolve())))
        base = rows[0][1]
        print(f"| drain of {args.jobs:,} no-op jobs, {args.slots} slots | jobs/s | vs no key |", flush=True)
        print("|---|---:|---:|")
        for title, rate in rows:
            print(f"| {title} | {rate:,.0f} | {rate / base:.2f}x |", flush=True)
        if args.main is not None:
            print(f"keyed vs main's keyless: {rows[1][1] / rows[-1][1]:.2f}x", flush=True)
    if args.pickups:
        plain, keyed = pickups(args.pickups, 100)
        print()
        print(f"| pickup, {args.pickups} jobs each way | p50 ms | p95 ms | p99 ms |")
        print("|---|---:|---:|---:|")
        for title, values in (("no key", plain), ("100 keys", keyed)):
            p50, p95, p99 = (percentile(values, p) for p in (50, 95, 99))
            print(f"| {title} | {p50:.1f} | {p95:.1f} | {p99:.1f} |", flush=True)
        print(
            f"keys vs no key: p50 {percentile(keyed, 50) / percentile(plain, 50):.2f}x, "
            f"p99 {percentile(keyed, 99) / percentile(plain, 99):.2f}x (median of each: "
            f"{statistics.median(keyed):.1f} / {statistics.median(plain):.1f} ms)",
            flush=True,
        )
    if args.snapshot_jobs:
        free = drain(args.snapshot_jobs, args.keys, args.slots)
        held = drain(args.snapshot_jobs, args.keys, args.slots, old_snapshot=True)
        print()
        print(f"| keyed drain of {args.snapshot_jobs:,} jobs over {args.keys:,} keys | jobs/s | ratio |")
        print("|---|---:|---:|")
        print(f"| no old snapshot | {free:,.0f} | 1.00x |")
        print(f"| old snapshot held throughout | {held:,.0f} | {held / free:.2f}x |", flush=True)
    if not args.skip_shares:
        print()
        print("\n".join(run_key_scenarios()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
