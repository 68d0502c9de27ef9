"""The operator's console on a big awa_job: each page's render time through Django's test client
as a logged-in superuser, against the 300 ms target (issue 28).

    python bench/console_pages.py                    # 10,000,000 rows (built once, then reused)
    python bench/console_pages.py --rows 1000000 --reps 7
    python bench/console_pages.py --rebuild          # build the table again
    python bench/console_pages.py --only search --no-rollup

The table is built in SQL (``INSERT ... SELECT generate_series``, a million rows a statement) in
its own database, ``awa_bench_console`` (never the test database), with a mix like a busy week:
90 % completed, 4 % failed (with error entries of 20 signatures), 1 % cancelled, 3 % available,
1 % scheduled, 0.5 % retryable, 0.5 % running; 40 kinds, 8 queues, args with a user id and an
order, two tags each, finished over the last seven days. It is then analysed, and the history
rollup is run until it has caught up on the last 24 hours (its rounds are timed and printed: that
is the maintenance leader's cost on such a table, and the plan of one round's read is shown).

The plan of each search's bounded count is printed (EXPLAIN ANALYZE: the scans of awa_job). Each
page is fetched once to warm up, then ``--reps`` times; the table prints the median and the
95th percentile (nearest rank) in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_DEBUG", "false")  # no query log: the pages as production renders them

from bench import floor

DB_NAME = "awa_bench_console"
TARGET_MS = 300.0
CHUNK = 1_000_000

BUILD = """
INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at,
                     attempted_by, heartbeat_at, finalized_at, created_at, errors, metadata, tags,
                     run_lease, fair_key, pending)
SELECT 'kind.' || (g %% 40),
       'q' || (g %% 8),
       jsonb_build_object('user_id', g %% 100000, 'order', jsonb_build_object('id', g)),
       s.state,
       1 + g %% 4,
       CASE WHEN s.state IN ('available', 'scheduled') THEN 0 ELSE 1 END,
       CASE WHEN s.state = 'failed' THEN 1 ELSE 25 END,
       t.created + interval '1 second' * (g %% 3),
       CASE WHEN s.state IN ('available', 'scheduled') THEN NULL ELSE t.created + interval '2 second' END,
       CASE WHEN s.state IN ('available', 'scheduled') THEN NULL ELSE 'bench-host:' || (g %% 4) END,
       CASE WHEN s.state = 'running' THEN now() END,
       CASE WHEN s.state IN ('completed', 'failed', 'cancelled')
            THEN t.created + interval '2 second' + interval '1 millisecond' * (g %% 5000) END,
       t.created,
       CASE WHEN s.state IN ('failed', 'retryable')
            THEN jsonb_build_array(jsonb_build_object('error', 'KeyError: ''template ' || (g %% 20) || '''',
                                                      'attempt', 1, 'at', t.created))
            ELSE '[]'::jsonb END,
       '{}'::jsonb,
       ARRAY['tenant-' || (g %% 50), 'bench'],
       CASE WHEN s.state IN ('available', 'scheduled') THEN 0 ELSE 1 END,
       '',
       0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
LATERAL (SELECT CASE WHEN g %% 1000 < 900 THEN 'completed'
                     WHEN g %% 1000 < 940 THEN 'failed'
                     WHEN g %% 1000 < 950 THEN 'cancelled'
                     WHEN g %% 1000 < 980 THEN 'available'
                     WHEN g %% 1000 < 990 THEN 'scheduled'
                     WHEN g %% 1000 < 995 THEN 'retryable'
                     ELSE 'running' END AS state) AS s,
LATERAL (SELECT now() - interval '1 second' * ((g * 7919) %% (7 * 86400)) AS created) AS t
"""


def build(rows: int, rebuild: bool) -> None:
    with floor.connect() as conn:
        have = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'awa_job'::regclass").fetchone()[0]
        if not rebuild and abs(have - rows) <= rows * 0.02:
            print(f"reusing awa_job of about {have:,} rows (--rebuild to build it again)", file=sys.stderr)
            return
        conn.execute("TRUNCATE awa_job, awa_history, awa_history_mark")
        started = time.monotonic()
        for first in range(1, rows + 1, CHUNK):
            last = min(first + CHUNK - 1, rows)
            with conn.transaction():
                conn.execute("SET LOCAL awa.notify_by_caller = 'on'")  # the insert trigger's NOTIFY: nobody listens
                conn.execute(BUILD, {"first": first, "last": last})
            print(f"  built {last:,} rows in {time.monotonic() - started:,.0f}s", file=sys.stderr, flush=True)
        conn.execute("VACUUM ANALYZE awa_job")
        print(f"  vacuumed and analysed in {time.monotonic() - started:,.0f}s", file=sys.stderr, flush=True)


def roll_up() -> None:
    """The history rollup until it reached the current minute; prints its rounds and one plan."""
    from awa_django.sql import statements
    from awa_django.worker.history import roll_up_history

    async def rounds() -> list[float]:
        import psycopg
        from django.conf import settings

        from bench.mvcc import conninfo

        took = []
        async with await psycopg.AsyncConnection.connect(
            **conninfo(settings.DATABASES["default"]), autocommit=True
        ) as conn:
            while True:
                started = time.monotonic()
                bounds = await roll_up_history(conn)
                took.append(time.monotonic() - started)
                if not bounds.catching_up:
                    return took

    took = asyncio.run(rounds())
    with floor.connect() as conn:
        last_hour = conn.execute(
            "SELECT date_trunc('minute', now()) - interval '1 hour', date_trunc('minute', now())"
        ).fetchone()
        rows = conn.execute("SELECT count(*) FROM awa_history").fetchone()[0]
        with conn.transaction(force_rollback=True):  # EXPLAIN ANALYZE runs the INSERT: undo it
            hour = {"start": last_hour[0], "stop": last_hour[1], "expired": last_hour[0]}
            conn.execute(statements["delete_history_minutes"], hour)  # as a round does, first
            plan = conn.execute(
                "EXPLAIN (ANALYZE, BUFFERS) " + statements["roll_up_history"],
                {"start": last_hour[0], "stop": last_hour[1], "top": 50},
            )
            text = "\n".join(r[0] for r in plan)
    print(f"history rollup: {len(took)} rounds to catch up on 24 h, median {statistics.median(took) * 1000:,.0f} ms, "
          f"max {max(took) * 1000:,.0f} ms; awa_history holds {rows:,} rows")  # fmt: skip
    print("plan of one round's read of awa_job (the last hour):")
    print("\n".join("    " + line for line in text.splitlines() if "awa_job" in line or "Execution" in line))


def pages() -> list[tuple[str, str]]:
    from awa_django.models import Job

    failed = Job.objects.filter(state="failed").order_by("-id").values_list("pk", flat=True).first()
    return [
        ("job list", "/admin/awa/job/"),
        ("job list: state failed", "/admin/awa/job/?state__exact=failed"),
        ("job list: queue q3, completed", "/admin/awa/job/?state__exact=completed&queue=q3"),
        ("job list: kind kind.7", "/admin/awa/job/?kind=kind.7"),
        ("search: id", f"/admin/awa/job/?q={failed}"),
        ("search: args user_id=42 (finished only: unfinished past the limit)", "/admin/awa/job/?q=user_id%3D42"),
        ("search: args user_id=42, every state (every_state=1)", "/admin/awa/job/?q=user_id%3D42&every_state=1"),
        ("search: failed + args user_id=42", "/admin/awa/job/?state__exact=failed&q=user_id%3D42"),
        ("search: failed + tag:tenant-7", "/admin/awa/job/?state__exact=failed&q=tag%3Atenant-7"),
        ("search: failed + error:template 7", "/admin/awa/job/?state__exact=failed&q=error%3Atemplate+7"),
        ("search: kind kind.3", "/admin/awa/job/?q=kind.3"),
        ("job detail (failed job)", f"/admin/awa/job/{failed}/change/"),
        ("failures", "/admin/awa/job/failures/"),
        ("running now", "/admin/awa/job/running/"),
        ("history per queue", "/admin/awa/job/history/"),
        ("history per kind", "/admin/awa/job/history/?by=kind"),
        ("dashboard", "/admin/awa/queue/dashboard/"),
        ("dashboard data (JSON)", "/admin/awa/queue/dashboard/data/"),
        ("queue list", "/admin/awa/queue/"),
        ("keys page (q3)", "/admin/awa/queue/keys/q3/"),
        ("workflow list", "/admin/awa/workflow/"),
    ]


SEARCHES: list[tuple[str, str | None, str]] = [
    ("args user_id=42", None, "user_id=42"),
    ("failed + args user_id=42", "failed", "user_id=42"),
    ("tag:tenant-7", None, "tag:tenant-7"),
    ("failed + tag:tenant-7", "failed", "tag:tenant-7"),
    ("failed + error:template 7", "failed", "error:template 7"),
    ("kind kind.3", None, "kind.3"),
]


def explain_searches() -> None:
    """EXPLAIN ANALYZE of the bounded count each search page runs (its costliest statement, the
    page's rows being the first 50 by id of the same set): the scans on awa_job and the time."""
    from django.db import connection

    from awa_django.admin.helpers import COUNT_LIMIT
    from awa_django.admin.search import search_jobs
    from awa_django.models import Job

    print("plans of the searches' bounded counts (EXPLAIN ANALYZE):")
    for name, state, term in SEARCHES:
        queryset = Job.objects.all() if state is None else Job.objects.filter(state=state)
        counted = search_jobs(queryset.only("id"), term, None if state is None else [state]).order_by()
        sql, params = counted[: COUNT_LIMIT + 1].query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE) SELECT count(*) FROM ({sql}) AS found", params)
            lines = [row[0] for row in cursor.fetchall()]
        print(f"  {name}:")
        for line in lines:
            if "Scan" in line or "Execution Time" in line:
                print("      " + line.strip())


class QueryClock:
    """Sums the time the page's SQL statements take (``connection.execute_wrapper``): the part of a
    page's time that is the database's, apart from rendering on a shared CPU."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started
            self.count += 1


def time_pages(reps: int, only: list[str]) -> list[tuple[str, float, float, float, int, int]]:
    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password=None)
    client = Client()
    client.force_login(user)
    out = []
    for name, url in pages():
        if only and not any(word in name for word in only):
            continue
        status = client.get(url).status_code
        times, db_times = [], []
        for _ in range(reps):
            clock = QueryClock()
            with connection.execute_wrapper(clock):
                started = time.perf_counter()
                client.get(url)
                times.append((time.perf_counter() - started) * 1000)
            db_times.append(clock.seconds * 1000)
        times.sort()
        p95 = times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)]
        out.append((name, statistics.median(times), p95, statistics.median(db_times), clock.count, status))
        print(f"  {name}: {statistics.median(times):,.0f} ms", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--only", action="append", default=[], help="time only the pages whose name has this")
    parser.add_argument("--no-rollup", action="store_true", help="skip the history rollup (already caught up)")
    args = parser.parse_args()
    floor.setup(DB_NAME)
    build(args.rows, args.rebuild)
    if not args.no_rollup:
        roll_up()
    explain_searches()
    results = time_pages(args.reps, args.only)
    print(f"\nawa_job of about {args.rows:,} rows; {args.reps} timed requests per page after one warm-up:")
    print("| page | status | median ms | p95 ms | SQL ms (median) | queries | p95 ≤ 300 ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | :---: |")
    for name, median, p95, db, queries, status in results:
        ok = "yes" if p95 <= TARGET_MS else "NO"
        print(f"| {name} | {status} | {median:,.0f} | {p95:,.0f} | {db:,.0f} | {queries} | {ok} |")


if __name__ == "__main__":
    main()
