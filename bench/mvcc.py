"""Throughput and pickup latency while another transaction holds an old snapshot (issue 16).

While any transaction holds an old snapshot, vacuum cannot remove the row versions that claims
and completions leave behind, and an index scan that starts at the front of the ready jobs walks
over every one of them. This script measures that, one ``awa_worker`` subprocess at a time:

    python bench/mvcc.py drain --sizes 30000,100000 --reps 2
    python bench/mvcc.py steady --seconds 600 --rate 2500 --producers 4 --batch 10
    python bench/mvcc.py sizes --jobs 1000000

``drain`` enqueues N noop jobs (COPY), then runs one worker until all are done, once without
and once with a second connection holding ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT
count(*) FROM awa_job`` for the whole drain; the two runs alternate, back to back, so the ratio
survives a machine shared with other work. The rate is N over the database's own span from the
first claim to the last completion (no process start-up in it).

``steady`` holds the old snapshot throughout and enqueues at a fixed rate (``--producers``
threads, ``--batch`` jobs per transaction; one job per transaction is what an application does,
but one Python thread reaches about 1,000 /s) while one worker runs; it prints pickup p50/p99
(claim time minus run_at) per window, and the last window's p99 over the second's (the first
holds the worker's start-up).

``sizes`` processes ``--jobs`` jobs (default 1,000,000) in chunks with no snapshot held, and prints
the hot table's and its indexes' sizes after each chunk: they must stay bounded (a completion
deletes the row from awa_job, autovacuum reclaims the space for the next chunk). Finished jobs go
to awa_job_done (migration 0023), whose partitions retention drops whole: here its completed
branch is emptied after each chunk (TRUNCATE, what a partition's DROP costs), and its size before
is printed beside.

Storage (migration 0023): a claim is an UPDATE of awa_job; a completion is a DELETE from awa_job
and an INSERT into awa_job_done. Completed jobs are counted and timed in awa_job_done.

The database is ``awa_bench_mvcc`` on the embedded server (or DATABASE_URL's server); each run
starts from an emptied, vacuumed ``awa_job`` and an empty ``awa_job_done``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "awa_bench_mvcc"
QUEUE = "bench"
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_mvcc_worker.log"  # the worker's output


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["AWA_DB_NAME"] = DB_NAME
    import psycopg

    from testproject import settings

    admin = dict(settings.DATABASES["default"])
    with psycopg.connect(**conninfo(admin, "postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone():
            conn.execute(f"CREATE DATABASE {DB_NAME}")  # a constant of this module
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def conninfo(db: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    host = db.get("HOST") or (db.get("OPTIONS") or {}).get("host") or None  # or ?host=/dir of DATABASE_URL
    if host is None and db.get("ENGINE") == "testproject.embedded_postgresql":
        from testproject.embedded import socket_dir

        host = socket_dir()  # the embedded backend fills HOST in only on its first connection
    info = {"dbname": name or db["NAME"], "user": db.get("USER") or None, "host": host}
    if db.get("PORT"):
        info["port"] = db["PORT"]
    if db.get("PASSWORD"):
        info["password"] = db["PASSWORD"]
    return {k: v for k, v in info.items() if v is not None}


def connect() -> Any:
    import psycopg
    from django.conf import settings

    return psycopg.connect(**conninfo(settings.DATABASES["default"]), autocommit=True)


def reset() -> None:
    with connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_job_done")
        conn.execute("VACUUM ANALYZE awa_job")


def enqueue(n: int) -> None:
    from awa_django.models import Job

    batch = 10_000
    for start in range(0, n, batch):
        Job.objects.enqueue_many([{"kind": "noop", "queue": QUEUE} for _ in range(min(batch, n - start))])


class OldSnapshot:
    """A second connection holding one REPEATABLE READ snapshot taken now, until closed."""

    def __init__(self) -> None:
        self.conn = connect()
        self.conn.autocommit = False
        self.conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self.conn.execute("SELECT count(*) FROM awa_job").fetchone()

    def close(self) -> None:
        self.conn.rollback()
        self.conn.close()


def start_worker() -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWA_DB_NAME=DB_NAME)
    log = open(WORKER_LOG, "ab")  # the worker process writes it until it ends
    return subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "awa_worker", "-q", QUEUE],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def updates(conn: Any) -> int:
    """The hot table's row writes so far: updates (claims) and deletes (completions)."""
    (n,) = conn.execute("SELECT n_tup_upd + n_tup_del FROM pg_stat_user_tables WHERE relname = 'awa_job'").fetchone()
    return int(n)


def completed(conn: Any) -> int:
    (done,) = conn.execute("SELECT count(*) FROM awa_job_done WHERE state = 'completed'").fetchone()
    return int(done)


def wait_done(n: int, since_updates: int, timeout: float) -> None:
    """Until all n jobs are completed. Counting rows competes with the worker for the two cores,
    so the cheap statistics counter (per job a claim, an UPDATE of awa_job, and a completion, a
    DELETE from it: 2n row writes) says when to count for real."""
    deadline = time.monotonic() + timeout
    with connect() as conn:
        while time.monotonic() < deadline:
            if updates(conn) - since_updates >= 2 * n and completed(conn) >= n:
                return
            time.sleep(0.5)
    raise SystemExit(f"the drain of {n} jobs did not finish within {timeout:.0f} s")


def entries_read(conn: Any) -> int:
    """Index entries the scans of awa_job_available_idx have read so far (dead ones included):
    the claim path's work, whatever the machine's load does to the rates."""
    (n,) = conn.execute(
        "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'awa_job_available_idx'"
    ).fetchone()
    return int(n)


def drain_once(n: int, old_snapshot: bool) -> tuple[float, float]:
    """The drain's rate (jobs/s) and the available-index entries read per job."""
    reset()
    enqueue(n)
    with connect() as conn:
        before = updates(conn)
        read_before = entries_read(conn)
    snapshot = OldSnapshot() if old_snapshot else None
    worker = start_worker()
    try:
        wait_done(n, before, timeout=max(120.0, n / 200))
    finally:
        stop_worker(worker)
        if snapshot is not None:
            snapshot.close()
    with connect() as conn:
        (span,) = conn.execute(
            "SELECT extract(epoch FROM max(finalized_at) - min(attempted_at)) FROM awa_job_done"
        ).fetchone()
        time.sleep(0.6)  # the server flushes its statistics counters at most every 0.5 s
        read = entries_read(conn) - read_before
    return n / float(span), read / n


def sizes_of(conn: Any) -> str:
    row = conn.execute(
        "SELECT pg_size_pretty(pg_table_size('awa_job')), pg_size_pretty(pg_indexes_size('awa_job'))"
    ).fetchone()
    return f"table={row[0]} indexes={row[1]}"


def drain(args: argparse.Namespace) -> None:
    print(
        "| jobs drained | no old snapshot (/s) | old snapshot held (/s) | ratio "
        "| index entries read per job: no snapshot / held |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for n in args.sizes:
        ratios, plain, held, read_plain, read_held = [], [], [], [], []
        for _ in range(args.reps):
            a, ra = drain_once(n, old_snapshot=False)
            b, rb = drain_once(n, old_snapshot=True)
            plain.append(a)
            held.append(b)
            ratios.append(b / a)
            read_plain.append(ra)
            read_held.append(rb)
            print(
                f"  n={n} plain={a:.0f}/s held={b:.0f}/s ratio={b / a:.2f} entries/job={ra:.1f}/{rb:.1f}",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"| {n:,} | {statistics.median(plain):,.0f} | {statistics.median(held):,.0f} "
            f"| {statistics.median(ratios):.2f} | {statistics.median(read_plain):.1f} / "
            f"{statistics.median(read_held):.1f} |",
            flush=True,
        )


def steady(args: argparse.Namespace) -> None:
    from django.db import connection

    from awa_django.models import Job

    reset()
    snapshot = OldSnapshot()
    worker = start_worker()
    stop = threading.Event()
    started = time.monotonic()
    per_producer = args.rate / args.producers

    def produce() -> None:
        # Each producer thread has its own Django connection; one transaction per `batch` jobs.
        interval = args.batch / per_producer
        nxt = time.monotonic()
        try:
            while not stop.is_set() and time.monotonic() - started < args.seconds:
                if args.batch == 1:
                    Job.objects.enqueue("noop", {}, queue=QUEUE)
                else:
                    Job.objects.enqueue_many([{"kind": "noop", "queue": QUEUE} for _ in range(args.batch)])
                nxt += interval
                delay = nxt - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        finally:
            connection.close()

    producers = [threading.Thread(target=produce, name=f"producer-{i}") for i in range(args.producers)]
    for producer in producers:
        producer.start()
    try:
        for producer in producers:
            producer.join()
        time.sleep(2)  # let the last jobs be claimed; every job is counted below either way
    finally:
        stop.set()
        stop_worker(worker)
        snapshot.close()
    with connect() as conn:
        rows = conn.execute(
            """
            SELECT floor(extract(epoch FROM run_at - min(run_at) OVER ()) / %s)::int AS bucket,
                   extract(epoch FROM attempted_at - run_at) * 1000 AS pickup_ms
            FROM awa_job_all WHERE attempted_at IS NOT NULL
            """,
            [args.bucket],
        ).fetchall()
        (unclaimed,) = conn.execute("SELECT count(*) FROM awa_job WHERE attempted_at IS NULL").fetchone()
        print(f"jobs={len(rows)} never claimed={unclaimed} {sizes_of(conn)}")
    buckets: dict[int, list[float]] = {}
    for bucket, ms in rows:
        buckets.setdefault(bucket, []).append(float(ms))
    print(f"| window ({args.bucket:.0f} s) | jobs | pickup p50 (ms) | pickup p99 (ms) |")
    print("| ---: | ---: | ---: | ---: |")
    p99s = []
    for bucket in sorted(buckets):
        values = sorted(buckets[bucket])
        p50 = values[len(values) // 2]
        p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
        p99s.append(p99)
        print(f"| {bucket} | {len(values)} | {p50:.1f} | {p99:.1f} |")
    full = [p for b, p in zip(sorted(buckets), p99s, strict=True) if len(buckets[b]) > args.rate * args.bucket * 0.5]
    # The first window holds the worker's start-up (its first claims wait for it): compare from the second.
    if len(full) >= 3:
        print(f"last/second window p99 = {full[-1] / full[1]:.2f}")


def sizes(args: argparse.Namespace) -> None:
    """Process ``--jobs`` jobs in chunks with one worker running throughout; after each chunk is
    done, print the hot table's size, then empty the finished jobs' completed branch (retention
    drops its partitions whole: no DELETE, no dead rows, whatever their number)."""
    reset()
    worker = start_worker()
    print(
        "| jobs processed | awa_job table | awa_job indexes | awa_job dead rows (stats) "
        "| awa_job_done (the chunk) | seconds |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    started = time.monotonic()
    try:
        done = 0
        while done < args.jobs:
            n = min(args.chunk, args.jobs - done)
            with connect() as conn:
                before = updates(conn)
            enqueue(n)
            wait_done(n, before, timeout=max(120.0, n / 200))
            done += n
            with connect() as conn:
                (dead,) = conn.execute(
                    "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'awa_job'"
                ).fetchone()
                table, indexes, finished = conn.execute(
                    "SELECT pg_size_pretty(pg_table_size('awa_job')), pg_size_pretty(pg_indexes_size('awa_job')),"
                    " pg_size_pretty((SELECT sum(pg_total_relation_size(relid))"
                    " FROM pg_partition_tree('awa_job_done') WHERE isleaf))"
                ).fetchone()
                conn.execute("TRUNCATE awa_job_done_completed")
            print(
                f"| {done:,} | {table} | {indexes} | {dead:,} | {finished} | {time.monotonic() - started:.0f} |",
                flush=True,
            )
    finally:
        stop_worker(worker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("drain", help="drain N jobs with and without an old snapshot, back to back")
    d.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[30_000, 100_000, 300_000])
    d.add_argument("--reps", type=int, default=1)
    s = sub.add_parser("steady", help="enqueue at a fixed rate with an old snapshot held; pickup p99 over time")
    s.add_argument("--seconds", type=float, default=600.0)
    s.add_argument("--rate", type=float, required=True, help="jobs per second (half the measured drain rate)")
    s.add_argument("--bucket", type=float, default=60.0, help="window length in seconds")
    s.add_argument("--producers", type=int, default=1, help="producer threads (the rate is split among them)")
    s.add_argument("--batch", type=int, default=1, help="jobs per enqueue transaction (1: Job.objects.enqueue)")
    z = sub.add_parser("sizes", help="process --jobs jobs in chunks with retention; table and index sizes")
    z.add_argument("--jobs", type=int, default=1_000_000)
    z.add_argument("--chunk", type=int, default=50_000)
    args = parser.parse_args()
    setup()
    if args.command == "drain":
        drain(args)
    elif args.command == "sizes":
        sizes(args)
    else:
        steady(args)


if __name__ == "__main__":
    main()
