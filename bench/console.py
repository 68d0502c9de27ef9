"""The console at scale (issue 43): each admin page and ``awa_health --json`` timed on a history of
N finished jobs, through Django's test client as a logged-in superuser.

    python bench/console.py                              # 5,500,000 rows in console_bench
    python bench/console.py --rows 20000000 --db console_bench20
    python bench/console.py --reuse --only search        # time again, no build
    python bench/console.py --drop                       # drop the database afterwards

The database is its own (``--db``, a name starting with ``console_``; created and migrated here,
never the test database). The history is written by the server (``INSERT ... SELECT
generate_series``, a million rows a statement), shaped like issue 43's: per 10,000 jobs 8,993
completed, 540 failed (error entries of 20 signatures), 90 cancelled, 360 scheduled and 17
retryable; ids in order of creation over the last 24 hours (a site at about 60 jobs/s keeping a
day), 40 kinds, 8 queues, a fifth of the jobs under one of 1,000 fair keys, args with a user id and
an order, two tags each. Where finished jobs have their own storage (``awa_job_done``, migration
0023: detected with ``to_regclass``), the finished rows are written there and the rest to
``awa_job``; before it, every row goes to ``awa_job``. Then VACUUM ANALYZE, and the history rollup
is run until it has caught up (``--no-rollup`` skips it).

Each page is fetched once to warm up, then ``--reps`` times; the table prints the median and the
slowest in seconds, the statements' share (median) and the status. It prints figures and asserts
nothing about time.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_DEBUG", "false")  # no query log: the pages as production renders them

from bench import floor

CHUNK = 1_000_000
ROWS = 5_500_000
SPAN_SECONDS = 86_400  # the history's ids spread over the last day, oldest first (--span-hours)

# Per 10,000 jobs (issue 43's mix: 5,000,000 completed, 300,000 failed, 50,000 cancelled, 200,000
# scheduled, 10,000 retryable): the state of job g is decided by g % 10,000.
STATE_OF = """CASE WHEN g %% 10000 < 8993 THEN 'completed'
                     WHEN g %% 10000 < 9533 THEN 'failed'
                     WHEN g %% 10000 < 9623 THEN 'cancelled'
                     WHEN g %% 10000 < 9983 THEN 'scheduled'
                     ELSE 'retryable' END"""

COLUMNS = """id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at, attempted_by,
             finalized_at, created_at, errors, metadata, tags, run_lease, fair_key, pending"""

# One chunk of jobs [first, last] of the ``total``, the finished ones or the others (``finished``).
BUILD = """
INSERT INTO {table} ({columns})
SELECT g,
       'kind.' || (g %% 40),
       'q' || (g %% 8),
       jsonb_build_object('user_id', g %% 100000, 'order', jsonb_build_object('id', g)),
       s.state,
       1 + g %% 4,
       CASE WHEN s.state = 'scheduled' THEN 0 ELSE 1 END,
       CASE WHEN s.state = 'failed' THEN 1 ELSE 25 END,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour' + interval '1 second' * (g %% 86400)
            WHEN s.state = 'retryable' THEN now() + interval '1 minute' * (1 + g %% 60)
            ELSE t.created + interval '1 second' END,
       CASE WHEN s.state = 'scheduled' THEN NULL ELSE t.created + interval '2 second' END,
       CASE WHEN s.state = 'scheduled' THEN NULL ELSE 'bench-host:' || (g %% 4) END,
       CASE WHEN s.state IN ('completed', 'failed', 'cancelled')
            THEN t.created + interval '2 second' + interval '1 millisecond' * (g %% 5000) END,
       t.created,
       CASE WHEN s.state IN ('failed', 'retryable')
            THEN jsonb_build_array(jsonb_build_object('error', 'KeyError: ''template ' || (g %% 20) || '''',
                                                      'attempt', 1, 'at', t.created))
            ELSE '[]'::jsonb END,
       '{{}}'::jsonb,
       ARRAY['tenant-' || (g %% 50), 'bench'],
       CASE WHEN s.state = 'scheduled' THEN 0 ELSE 1 END,
       CASE WHEN g %% 5 = 0 THEN 'tenant:' || (g / 5 %% 1000) ELSE '' END,
       0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
LATERAL (SELECT {state_of} AS state) AS s,
LATERAL (SELECT now() - interval '1 second' * ({span} * (%(total)s - g) / %(total)s) AS created) AS t
WHERE (s.state IN ('completed', 'failed', 'cancelled')) = %(finished)s
"""


def storage(conn: Any) -> str | None:
    """``awa_job_done`` when finished jobs have their own table (migration 0023), else None."""
    return conn.execute("SELECT to_regclass('awa_job_done')::text").fetchone()[0]


# awa_job_done's two branches (migration 0023) and the prefix of their range partitions' names, as
# the leader's retention names them (awa_django/worker/retention.py).
BRANCHES = (("awa_job_done_completed", "awa_job_done_c_"), ("awa_job_done_failed", "awa_job_done_f_"))

PARTITION = "CREATE TABLE IF NOT EXISTS {name} PARTITION OF {branch} FOR VALUES FROM ({lower}) TO ({upper})"


def prepare_partitions(conn: Any, span_seconds: int = SPAN_SECONDS, width: timedelta | None = None) -> None:
    """Range partitions of each branch of awa_job_done over the history's span and two widths
    ahead, as the leader's retention keeps them for the default retentions (``retention.width_for``:
    an hour for the completed jobs' day, six hours for the failed jobs' week), or of ``width`` (a
    day, as until 2026-12-06, to compare): the rows land in their own partition, not the DEFAULT one."""
    from psycopg import sql

    from awa_django import defaults
    from awa_django.worker import retention

    now = conn.execute("SELECT now()").fetchone()[0]
    keeps = (defaults.COMPLETED_RETENTION_DEFAULT, defaults.FAILED_RETENTION_DEFAULT)
    for (branch, prefix), keep in zip(BRANCHES, keeps, strict=True):
        step = width or retention.width_for(timedelta(seconds=keep))
        lower = retention.floor_to(now - timedelta(seconds=span_seconds + 86_400), step)  # a day more back
        while lower < now + 2 * step:
            name = f"{prefix}{lower.astimezone(UTC):%Y%m%d_%H%M}"
            upper = lower + step
            names = {"name": sql.Identifier(name), "branch": sql.Identifier(branch)}
            conn.execute(sql.SQL(PARTITION).format(**names, lower=sql.Literal(lower), upper=sql.Literal(upper)))
            lower = upper


# Indexes of awa_job_done proposed for the console by this bench (issue 43), now in migration 0023:
# ``--no-proposed-indexes`` drops them (and ``--proposed-indexes`` builds them back) to time the
# pages both ways.
PROPOSED = {
    # The fair-key filter and the key: search: the jobs of one key, newest first; the default key
    # (most jobs, dense: the walk down the id index finds its page at once) takes no entry.
    "awa_job_done_fair_key_idx": "CREATE INDEX IF NOT EXISTS awa_job_done_fair_key_idx "
    "ON awa_job_done (fair_key, id) WHERE fair_key <> ''",
    # The created_at filters (a block range index was tried first: the planner prices it above a
    # sequential scan of the partition, 155,000 pages for an hour of 5.5 M rows, and takes that).
    # (Migration 0026 replaced it with (created_at) INCLUDE (id): a one-hour filter's newest ids
    # sorted from index entries alone.)
    "awa_job_done_created_id_idx": "CREATE INDEX IF NOT EXISTS awa_job_done_created_id_idx "
    "ON awa_job_done (created_at) INCLUDE (id)",
}


def proposed_indexes(build: bool) -> None:
    with floor.connect() as conn:
        if storage(conn) is None:
            return
        for name, statement in PROPOSED.items():
            started = time.monotonic()
            conn.execute(statement if build else f"DROP INDEX IF EXISTS {name}")  # names of ours
            verb = "built" if build else "dropped"
            print(f"  {verb} {name} in {time.monotonic() - started:,.1f}s", file=sys.stderr, flush=True)
        conn.execute("ANALYZE awa_job_done")


def build(rows: int, span_seconds: int = SPAN_SECONDS, width: timedelta | None = None) -> None:
    with floor.connect() as conn:
        done = storage(conn)
        tables = ["awa_job", *([done] if done else [])]
        conn.execute(f"TRUNCATE {', '.join(tables)}, awa_history, awa_history_mark")  # names of ours
        if done:
            prepare_partitions(conn, span_seconds, width)
        started = time.monotonic()
        for first in range(1, rows + 1, CHUNK):
            last = min(first + CHUNK - 1, rows)
            params = {"first": first, "last": last, "total": rows}
            with conn.transaction():
                conn.execute("SET LOCAL awa.notify_by_caller = 'on'")  # the insert trigger's NOTIFY: nobody listens
                for table, finished in ((done or "awa_job", True), ("awa_job", False)):
                    statement = BUILD.format(table=table, columns=COLUMNS, state_of=STATE_OF, span=span_seconds)
                    conn.execute(statement, {**params, "finished": finished})
            print(f"  built {last:,} rows in {time.monotonic() - started:,.0f}s", file=sys.stderr, flush=True)
        conn.execute("SELECT setval(pg_get_serial_sequence('awa_job', 'id'), %s)", [rows])
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")  # names of ours
        print(f"  vacuumed and analysed in {time.monotonic() - started:,.0f}s", file=sys.stderr, flush=True)


def sizes() -> list[tuple[str, int, int]]:
    """(table, rows, bytes with indexes) of the job tables: a partitioned one summed over its leaves."""
    with floor.connect() as conn:
        done = storage(conn)
        out = []
        for table in ["awa_job", *([done] if done else [])]:
            total = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint, "
                "coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), 0)::bigint FROM pg_class AS c "
                "WHERE c.oid = %s::regclass AND c.relkind = 'r' "
                "OR c.oid IN (SELECT t.relid FROM pg_partition_tree(%s::regclass) AS t WHERE t.isleaf)",
                [table, table],
            ).fetchone()
            out.append((table, int(total[1]), int(total[0])))
        return out


def roll_up() -> None:
    """The history rollup until it reached the current minute (the leader's catch-up)."""
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
    print(f"history rollup: {len(took)} rounds to catch up, {sum(took):,.1f} s in all", file=sys.stderr)


def pages(hour: datetime | None = None) -> list[tuple[str, str]]:
    """The pages timed; the time filters' hour is ``hour``, or the one that began three hours ago."""
    from django.utils import timezone

    from awa_django.models import Job

    failed = Job.objects.filter(state="failed").order_by("-id").values_list("pk", flat=True).first()
    if hour is None:
        hour = (timezone.now() - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    span = {"gte": hour.isoformat(), "lt": (hour + timedelta(hours=1)).isoformat()}
    created = urlencode({f"created_at__{op}": value for op, value in span.items()})
    finalized = urlencode({f"finalized_at__{op}": value for op, value in span.items()})
    return [
        ("job list", "/admin/awa/job/"),
        ("job list: state completed", "/admin/awa/job/?state__exact=completed"),
        ("job list: state failed", "/admin/awa/job/?state__exact=failed"),
        ("job list: state scheduled", "/admin/awa/job/?state__exact=scheduled"),
        ("job list: queue q3", "/admin/awa/job/?queue=q3"),
        ("job list: kind kind.7", "/admin/awa/job/?kind=kind.7"),
        ("job list: older page (before= an id mid-history)", f"/admin/awa/job/?before={(failed or 2) // 2}"),
        ("job list: oldest page (after=0)", "/admin/awa/job/?after=0"),
        ("job list: page 110,000 by number (refused: an OFFSET)", "/admin/awa/job/?p=110000"),
        ("job list: queue q3, oldest page", "/admin/awa/job/?queue=q3&after=0"),
        ("job list: created_at, one hour", f"/admin/awa/job/?{created}"),
        ("job list: finalized_at, one hour", f"/admin/awa/job/?{finalized}"),
        ("job list: created_at, one hour, oldest page", f"/admin/awa/job/?{created}&after=0"),
        ("job list: finalized_at, one hour, oldest page", f"/admin/awa/job/?{finalized}&after=0"),
        ("job list: fair key tenant:7", "/admin/awa/job/?fair_key=tenant%3A7"),
        ("search: id", f"/admin/awa/job/?q={failed}"),
        ("search: args user_id=42", "/admin/awa/job/?q=user_id%3D42"),
        ("search: args user_id=42, every state", "/admin/awa/job/?q=user_id%3D42&every_state=1"),
        ("search: tag:tenant-7", "/admin/awa/job/?q=tag%3Atenant-7"),
        ("search: failed + error:template 7", "/admin/awa/job/?state__exact=failed&q=error%3Atemplate+7"),
        ("search: error:template 7", "/admin/awa/job/?q=error%3Atemplate+7"),
        ("search: key:tenant:7", "/admin/awa/job/?q=key%3Atenant%3A7"),
        ("search: kind kind.3", "/admin/awa/job/?q=kind.3"),
        ("job detail (failed job)", f"/admin/awa/job/{failed}/change/"),
        ("failure groups", "/admin/awa/job/failures/"),
        ("running now", "/admin/awa/job/running/"),
        ("history per queue", "/admin/awa/job/history/"),
        ("history per kind", "/admin/awa/job/history/?by=kind"),
        ("dashboard", "/admin/awa/queue/dashboard/"),
        ("dashboard data (JSON)", "/admin/awa/queue/dashboard/data/"),
        ("queue list", "/admin/awa/queue/"),
        ("keys page (q3)", "/admin/awa/queue/keys/q3/"),
    ]


class QueryClock:
    """Sums the time the page's SQL statements take (``connection.execute_wrapper``)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started


Row = tuple[str, str, float, float, float]


def measure(name: str, reps: int, fetch: Callable[[], str]) -> Row:
    from django.db import connection

    status = fetch()
    times, db_times = [], []
    for _ in range(reps):
        clock = QueryClock()
        with connection.execute_wrapper(clock):
            started = time.perf_counter()
            fetch()
            times.append(time.perf_counter() - started)
        db_times.append(clock.seconds)
    print(f"  {name}: {statistics.median(times):.3f} s", file=sys.stderr, flush=True)
    return name, status, statistics.median(times), max(times), statistics.median(db_times)


def time_pages(reps: int, only: list[str], hour: datetime | None = None) -> list[Row]:
    from django.contrib.auth.models import User
    from django.core.management import CommandError, call_command
    from django.test import Client
    from django.test.utils import setup_test_environment

    setup_test_environment()
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser("bench", password=None)
    client = Client()
    client.force_login(user)
    out = []

    def page(url: str) -> Callable[[], str]:
        def fetch() -> str:
            response = client.get(url)
            return str(response.status_code)

        return fetch

    def health() -> str:
        report = io.StringIO()
        try:
            call_command("awa_health", "--json", stdout=report)
        except SystemExit as exit_:  # unhealthy (no live worker here) is a report too
            return f"exit {exit_.code}"
        except CommandError as error:  # unhealthy or unreadable: its return code is the verdict
            return f"exit {getattr(error, 'returncode', '?')}"
        return "exit 0"

    for name, url in [*pages(hour), ("awa_health --json", "")]:
        if only and not any(word in name for word in only):
            continue
        out.append(measure(name, reps, page(url) if url else health))
    return out


def drop(name: str) -> None:
    import psycopg
    from django.conf import settings
    from django.db import connections

    from bench.mvcc import conninfo

    connections.close_all()
    with psycopg.connect(**conninfo(settings.DATABASES["default"], "postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name}")  # checked by main: letters, digits, _


def migrate_awa(target: str | None) -> None:
    """``migrate awa TARGET`` (None: the latest), timed: a migration's indexes built on the bench's
    history (CONCURRENTLY, as a deploy builds them)."""
    from django.core.management import call_command

    started = time.monotonic()
    call_command("migrate", "awa", *([target] if target else []), verbosity=0)
    print(f"  migrate awa {target or '(latest)'}: {time.monotonic() - started:,.1f}s", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"jobs in the history (default {ROWS:,})")
    parser.add_argument("--db", default="console_bench", help="the bench's database, a name starting with console_")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--reuse", action="store_true", help="time the pages on the database as it is")
    parser.add_argument("--no-rollup", action="store_true", help="skip the history rollup's catch-up")
    parser.add_argument("--roll-up", action="store_true", help="with --reuse: run the rollup's catch-up again")
    parser.add_argument("--only", action="append", default=[], help="time only the pages whose name has this")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    parser.add_argument(
        "--span-hours",
        type=float,
        default=SPAN_SECONDS / 3600,
        help="the hours the history's jobs were created over (default 24): --rows 5500000 --span-hours 6.6 "
        "has 20 M a day's jobs per hour, for the time filters",
    )
    parser.add_argument(
        "--width-hours",
        type=float,
        help="the history's partitions' width when built (default: the worker's, an hour for a day's retention; "
        "24: a day, as until 2026-12-06)",
    )
    parser.add_argument(
        "--hour",
        type=datetime.fromisoformat,
        help="the time filters' hour (ISO, e.g. 2026-12-05T07:00+00:00; default: the one that began 3 hours ago)",
    )
    parser.add_argument(
        "--schema",
        help="migrate awa to this migration before timing (0025: before migration 0026's console indexes), "
        "then back to the latest at the end",
    )
    parser.add_argument(
        "--proposed-indexes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="build (or, with --no-, drop) the indexes of awa_job_done proposed for the console (PROPOSED)",
    )
    args = parser.parse_args()
    if not args.db.startswith("console_") or not args.db.replace("_", "").isalnum():
        parser.error(f"--db {args.db!r}: give a name of letters, digits and _ starting with console_")
    floor.setup(args.db)
    if not args.reuse:
        build(args.rows, round(args.span_hours * 3600), timedelta(hours=args.width_hours) if args.width_hours else None)
    if args.schema:
        migrate_awa(args.schema)
    if args.roll_up or not (args.reuse or args.no_rollup):
        with floor.connect() as conn:
            conn.execute("TRUNCATE awa_history, awa_history_mark")  # a new leader's catch-up, from nothing
        roll_up()
    if args.proposed_indexes is not None:
        proposed_indexes(args.proposed_indexes)
    results = time_pages(args.reps, args.only, args.hour)
    with floor.connect() as conn:
        present = [name for name in PROPOSED if conn.execute("SELECT to_regclass(%s)", [name]).fetchone()[0]]
    # Built here (migration 0023 and later carry them); named so a run with --no-proposed-indexes reads apart.
    indexes = f"with {', '.join(present)}" if present else "without the console's created_at and fair-key indexes"
    if args.schema:
        indexes += f", awa at {args.schema}"
    built = "the database as it was (--reuse)" if args.reuse else f"{args.rows:,} jobs"
    print(f"\n{built} ({indexes}); {args.reps} timed requests per page after one warm-up; seconds:")
    for table, rows, size in sizes():
        print(f"  {table}: about {rows:,} rows, {size / 2**30:.2f} GB with its indexes")
    print("| page | status | median s | slowest s | SQL s (median) |")
    print("| --- | :---: | ---: | ---: | ---: |")
    for name, status, median, slowest, db in results:
        print(f"| {name} | {status} | {median:.3f} | {slowest:.3f} | {db:.3f} |")
    if args.schema:
        migrate_awa(None)
    if args.drop:
        from django.db import connections

        connections.close_all()
        drop(args.db)


if __name__ == "__main__":
    main()
