"""A bulk retry of many failed jobs against a live worker's pickup tail.

    python bench/bulk_retry.py                          # 1,000,000 failed jobs
    python bench/bulk_retry.py --jobs 100000 --samples 300

Builds N failed ``noop`` jobs in queue ``bulk-parked`` with one ``INSERT ... SELECT
generate_series`` (in an emptied, vacuumed ``awa_job`` of database ``awa_bench_bulk``), then starts
one ``awa_worker -q bench``. No worker serves ``bulk-parked``: the retried jobs become available
there and stay so, so what competes with the measured queue is only the bulk's own reads, locks,
writes and NOTIFYs, not the retried jobs' execution.

Pickup is measured as ``bench/pickup_tail.py`` does: one ``noop`` job at a time into ``bench``
(autocommit) after a random 20-60 ms gap, each job's pickup read from its row
(``attempted_at - run_at``, the database's clock). First ``--samples`` jobs with the worker idle;
then, while a thread runs the bulk retry over the whole filter (``queue = bulk-parked``) the way
the admin's bulk view does (the next ``CHUNK`` ids past the cursor in id order, each chunk through
``retry_jobs(ids, skip_locked=True)``, its own transaction, then the page's pause,
``awa_django.admin.bulk.pause_after``), one job at a time again until the bulk ends. It prints
p50/p95/p99/max of both phases and the ratio of the p99s (target: at most 2x), the bulk's rate
(jobs retried over its wall time), the WAL it wrote, and what the database's active backends (the
bulk's apart from the others: the worker's and the enqueues'; not the sampler's)
were waiting on, idle and during the bulk (``pg_stat_activity``, sampled every 20 ms).
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)
from bench.pickup_tail import percentile  # noqa: E402

DB_NAME = "awa_bench_bulk"
PARKED = "bulk-parked"  # a queue no worker serves

BUILD = """
INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at,
                     attempted_by, finalized_at, created_at, errors, metadata, tags, run_lease,
                     fair_key, pending)
SELECT 'noop', %(queue)s, jsonb_build_object('n', g), 'failed', 2, 1, 1,
       now() - interval '1 hour', now() - interval '1 hour', 'bench-host:0', now() - interval '59 minutes',
       now() - interval '1 hour',
       jsonb_build_array(jsonb_build_object('error', 'KeyError: ''template''', 'attempt', 1,
                                            'at', now() - interval '59 minutes')),
       '{}'::jsonb, ARRAY['bench'], 1, '', 0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g
"""


def build(n: int) -> float:
    """An emptied awa_job with n failed jobs in the parked queue; return the seconds it took."""
    started = time.monotonic()
    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done")
        step = 250_000
        for first in range(1, n + 1, step):
            conn.execute(BUILD, {"queue": PARKED, "first": first, "last": min(n, first + step - 1)})
        conn.execute("VACUUM ANALYZE awa_job")
    return time.monotonic() - started


def start_worker() -> subprocess.Popen[bytes]:
    from awa_django.models import Job

    with open(floor.WORKER_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", floor.QUEUE],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    with floor.connect() as conn:
        for _ in range(3):  # warm-up: the worker is up and listening once these are done
            Job.objects.enqueue("noop", queue=floor.QUEUE)
        deadline = time.monotonic() + 60
        query = "SELECT count(*) FROM awa_job_all WHERE queue = %s AND state = 'completed'"
        while conn.execute(query, [floor.QUEUE]).fetchone()[0] < 3:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"the worker did not start; see {floor.WORKER_LOG}")
            time.sleep(0.05)
    return proc


def sample_one() -> int:
    from awa_django.models import Job

    time.sleep(random.uniform(0.02, 0.06))
    return int(Job.objects.enqueue("noop", queue=floor.QUEUE).pk)


def pickups(conn: Any, ids: list[int]) -> list[float]:
    """Each job's pickup in ms, once all of them are claimed."""
    deadline = time.monotonic() + 60
    query = "SELECT count(*) FROM awa_job_all WHERE id = ANY(%s) AND attempted_at IS NULL"
    while conn.execute(query, [ids]).fetchone()[0]:
        if time.monotonic() > deadline:
            raise SystemExit("jobs left unclaimed")
        time.sleep(0.05)
    rows = conn.execute(
        "SELECT extract(epoch FROM attempted_at - run_at) * 1000 FROM awa_job_all WHERE id = ANY(%s)", [ids]
    ).fetchall()
    return [float(ms) for (ms,) in rows]


class BulkRetry(threading.Thread):
    """The admin bulk view's loop over the whole filter, chunk after chunk, until it is exhausted."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.retried = 0
        self.seen = 0
        self.chunks = 0
        self.chunk_seconds: list[float] = []
        self.seconds = 0.0
        self.pid = 0  # the bulk's backend, so its own waits can be told from the worker's
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connection

        from awa_django.admin.bulk import CHUNK, apply_paced
        from awa_django.models import Job
        from awa_django.services.jobs import retry_jobs

        connection.ensure_connection()
        self.pid = int(connection.connection.info.backend_pid)
        jobs = Job.objects.filter(queue=PARKED)  # the list filtered on queue, as ?queue=... gives
        after = 0
        started = time.monotonic()
        try:
            while True:
                chunk_started = time.monotonic()
                ids = list(jobs.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:CHUNK])
                retried, pause = apply_paced(retry_jobs, ids)  # the admin's request: steps and pauses
                if ids:
                    self.retried += retried
                    self.seen += len(ids)
                    self.chunks += 1
                    after = ids[-1]
                self.chunk_seconds.append(time.monotonic() - chunk_started)
                if len(ids) < CHUNK:
                    break
                time.sleep(pause)  # the admin page's pause before posting the next chunk
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.seconds = time.monotonic() - started
            connection.close()


class Waits(threading.Thread):
    """What the database's active backends but this one wait on, the bulk's apart, until stopped."""

    def __init__(self, bulk: BulkRetry) -> None:
        super().__init__(daemon=True)
        self.bulk = bulk
        self.stop = threading.Event()
        self.counts: collections.Counter[str] = collections.Counter()
        self.samples = 0

    def run(self) -> None:
        with floor.connect() as conn:
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'on CPU'), pid FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'"
                ).fetchall()
                self.samples += 1
                for event, pid in rows:
                    self.counts[f"{'bulk' if pid == self.bulk.pid else 'worker/enqueue'} {event}"] += 1
                time.sleep(0.02)


def row(label: str, values: list[float]) -> str:
    return (
        f"| {label} | {len(values)} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} "
        f"| {percentile(values, 0.99):.2f} | {max(values):.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000, help="failed jobs to retry")
    parser.add_argument("--samples", type=int, default=300, help="idle pickup samples")
    args = parser.parse_args()
    floor.setup(DB_NAME)
    built = build(args.jobs)
    print(f"built {args.jobs:,} failed jobs in {built:.1f} s", file=sys.stderr)
    proc = start_worker()
    try:
        with floor.connect() as conn:
            bulk = BulkRetry()
            idle_waits = Waits(bulk)  # the same reading with no bulk: what the enqueues cost alone
            idle_waits.start()
            idle_ids = [sample_one() for _ in range(args.samples)]
            idle_waits.stop.set()
            idle_waits.join()
            idle = pickups(conn, idle_ids)
            print(f"  idle p50 {percentile(idle, 0.5):.2f} ms", file=sys.stderr)
            lsn_before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
            waits = Waits(bulk)
            waits.start()
            bulk.start()
            busy_ids: list[int] = []
            while bulk.is_alive():
                busy_ids.append(sample_one())
            bulk.join()
            waits.stop.set()
            waits.join()
            wal = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [lsn_before]).fetchone()[0]
            if bulk.error is not None:
                raise bulk.error
            busy = pickups(conn, busy_ids)
            left = conn.execute(
                "SELECT count(*) FROM awa_job_all WHERE queue = %s AND state = 'failed'", [PARKED]
            ).fetchone()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ratio = percentile(busy, 0.99) / percentile(idle, 0.99)
    print(f"bulk retry of {args.jobs:,} failed jobs against one worker's pickup (claim now() - run_at):")
    print("| phase | samples | p50 ms | p95 ms | p99 ms | max ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    print(row("idle", idle))
    print(row("during the bulk retry", busy))
    print(f"p99 ratio (bulk / idle): {ratio:.2f}x ({'within' if ratio <= 2 else 'OVER'} the 2x target)")
    print(
        f"bulk: {bulk.retried:,} of {bulk.seen:,} retried ({left:,} left failed) in {bulk.chunks:,} chunks, "
        f"{bulk.seconds:.1f} s = {bulk.retried / bulk.seconds:,.0f} jobs/s; chunk p50 "
        f"{percentile(bulk.chunk_seconds, 0.5) * 1000:.0f} ms, p99 {percentile(bulk.chunk_seconds, 0.99) * 1000:.0f} ms"
    )
    print(f"WAL during the bulk: {float(wal) / 2**20:,.0f} MiB ({float(wal) / max(1, bulk.retried):,.0f} B a job)")
    for phase, seen in (("idle", idle_waits), ("during the bulk", waits)):
        print(f"active backends {phase}, {seen.samples} samples of pg_stat_activity:")
        for event, count in seen.counts.most_common(12):
            print(f"  {event}: {count} ({count / max(1, seen.samples):.2f} a sample)")


if __name__ == "__main__":
    main()
