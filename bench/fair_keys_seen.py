"""What seeing the fairness keys costs: the admin's keys page read and the top-keys read of
``awa_health --json`` and the depth view, on one queue of N available jobs over K keys.

    python bench/fair_keys_seen.py                      # 100,000 jobs over 10,000 keys, 7 repetitions
    python bench/fair_keys_seen.py --jobs 100000 --keys 10 --reps 7
    python bench/fair_keys_seen.py --finished 400000  # and 400,000 completed rows (retained history)

On its own database (``awa_bench_fair_keys``, embedded server or DATABASE_URL's): fills ``awa_job``
with N jobs (key ``tenant:<i % K>``), 1 % of them running and the rest available, and
``--finished`` completed ones (which a busy table holds most of), VACUUM ANALYZE (so the
partial indexes are read index-only, as on a table autovacuum keeps up with), then times, each
repetition:

- ``count_queue_keys``: the statement alone (one GROUP BY per partial index);
- ``queue_keys``: the whole keys page's data (the statement, the settings, the slots, water_fill);
- ``count_top_keys``: the ranked top-10-plus-other read over every queue.

It prints the median milliseconds of each and the plan of ``count_queue_keys``
(``EXPLAIN (ANALYZE, BUFFERS)``), to show which indexes it reads. The machine is shared: read the
medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import floor  # noqa: E402  (the path above first)

DB_NAME = "awa_bench_fair_keys"


def fill(jobs: int, keys: int, finished: int) -> None:
    with floor.connect() as conn:
        conn.execute("TRUNCATE awa_job, awa_fair_key")
        conn.execute(
            """
            INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
                                 errors, metadata, tags, run_lease, fair_key)
            SELECT 'noop', %(queue)s, '{}', CASE WHEN i %% 100 = 0 THEN 'running' ELSE 'available' END, 2,
                   0, 25, now(), now(), '[]', '{}', '{}', 0, 'tenant:' || (i %% %(keys)s)
            FROM generate_series(1, %(jobs)s) AS i
            """,
            {"queue": floor.QUEUE, "keys": keys, "jobs": jobs},
        )
        conn.execute(
            """
            INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,
                                 finalized_at, errors, metadata, tags, run_lease, fair_key)
            SELECT 'noop', %(queue)s, '{}', 'completed', 2, 1, 25, now(), now(), now(), '[]', '{}', '{}', 1,
                   'tenant:' || (i %% %(keys)s)
            FROM generate_series(1, %(finished)s) AS i
            """,
            {"queue": floor.QUEUE, "keys": keys, "finished": finished},
        )
        conn.execute("VACUUM ANALYZE awa_job")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--finished", type=int, default=0, help="completed rows besides (default 0)")
    args = parser.parse_args()
    floor.setup(DB_NAME)
    from django.db import connection

    from awa_django.services.keys import queue_keys
    from awa_django.sql import statements

    fill(args.jobs, args.keys, args.finished)
    took: dict[str, list[float]] = {"count_queue_keys": [], "queue_keys": [], "count_top_keys": []}
    for _ in range(args.reps):
        with connection.cursor() as cursor:
            started = time.perf_counter()
            cursor.execute(statements["count_queue_keys"], {"queue": floor.QUEUE})
            groups = len(cursor.fetchall())
            took["count_queue_keys"].append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            cursor.execute(statements["count_top_keys"], {"top": 10})
            top_rows = len(cursor.fetchall())
            took["count_top_keys"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        page = queue_keys(floor.QUEUE)
        took["queue_keys"].append((time.perf_counter() - started) * 1000)
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statements["count_queue_keys"], {"queue": floor.QUEUE}
        )
        plan = [row[0] for row in cursor.fetchall()]
    print(f"{args.finished:,} completed rows besides;")
    print(f"{args.jobs:,} jobs over {args.keys:,} keys ({groups:,} groups; {page.contending_keys:,} keys contending),")
    print(f"{args.reps} repetitions; count_top_keys returned {top_rows} rows:")
    print("| read | ms (median) |")
    print("| --- | ---: |")
    for name, values in took.items():
        print(f"| {name} | {statistics.median(values):.1f} |")
    print("\ncount_queue_keys plan:")
    print("\n".join(plan))


if __name__ == "__main__":
    main()
