"""The cost of ``@job(atomic=True)``: an atomic no-op drain against a plain one, paired (issue 45).

    python bench/atomic.py                          # 10,000 jobs, 5 alternated pairs
    python bench/atomic.py --jobs 20000 --reps 3 --conn-max-age 0
    python bench/atomic.py --handler touch          # handlers that write one row each
    python bench/atomic.py --handler look           # handlers that read once and write nothing
    python bench/atomic.py --db awa_bench_history_5m  # on bench/history.py's database: 5.5 M finished jobs

Each repetition drains N ``noop_sync`` jobs (a ``def`` handler doing nothing: the worker's thread
pool, its completion in the batch writer's next round trip) and N ``noop_atomic`` jobs (the same,
with ``atomic=True``: ``transaction.atomic()`` on the thread's Django connection; it sends nothing,
so no transaction begins and its completion goes to the batch writer as the plain one's), in
alternating order (plain first on odd repetitions), or, with ``--handler touch``, ``touch_sync``
against ``touch_atomic`` (each writes one row: the plain one commits it on its own, the atomic one
with its completion, written in its transaction, one COMMIT per job), or, with ``--handler look``,
``look_sync`` against ``look_atomic`` (each reads once and writes nothing: the atomic one's read
begins its transaction, so its completion is written in it, the path's cost without a write),
each with one ``manage.py awa_worker -q bench`` started for it, on an emptied, vacuumed table.

Printed per repetition and as medians: the rate over the database's own span (first claim to last
completion: no start-up, no polling delay), the worker's CPU µs per job and the server's (every
PostgreSQL process on this machine: the embedded server's, ``floor.server_cpu_seconds``), from 10 %
of the jobs completed to the end (``/proc``), and the median of the paired ratios atomic ÷ plain (rate and
CPU). ``--conn-max-age`` is the worker's ``CONN_MAX_AGE`` (default 600: persistent connections,
what a worker should run with, docs/guide/exactly-once.md); 0 is Django's default, under which
each atomic attempt opens and closes a connection of its own.

The database is ``awa_bench_atomic`` on the embedded server (or DATABASE_URL's), its job tables
emptied before each drain. ``--db NAME`` runs on another database instead, keeping what it holds:
bench/history.py's ``awa_bench_history_5m`` (``python bench/history.py compare --history 5560000``
builds it), where every completion lands beside a day of finished jobs; only the bench queue's jobs
are deleted from ``awa_job`` before each drain, and every count and span is of the jobs that drain
enqueued (ids from the first of them). The machine is shared: read the medians and the paired
ratios, not one repetition.

``--statements`` also prints, after each drain, the statements the server spent most on during it
(calls, µs a call, µs a job: execution time from ``pg_stat_statements``, reset before the drain).
It needs the extension loaded and created in the bench database, on the embedded server:
``ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'`` (and
``pg_stat_statements.track = 'all'`` to see inside functions), a restart
(``python -m testproject.embedded stop`` and ``start``), then ``CREATE EXTENSION
pg_stat_statements`` in ``awa_bench_atomic``. Measuring slows the server a little; compare
drains measured the same way.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.floor import connect, cpu_seconds, server_cpu_seconds, setup  # noqa: E402 (ROOT on the path first)

DB_NAME = "awa_bench_atomic"
QUEUE = "bench"
# testproject/demo/jobs.py: a handler doing nothing, one writing one row (an Execution), one reading once.
HANDLERS = {
    "noop": {"plain": "noop_sync", "atomic": "noop_atomic"},
    "touch": {"plain": "touch_sync", "atomic": "touch_atomic"},
    "look": {"plain": "look_sync", "atomic": "look_atomic"},
}
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_atomic_worker.log"
AS_WORKER = "--as-worker"


def tables(conn: Any) -> list[str]:
    """The job tables there are: the hot one, and the finished one once storage has it."""
    found = conn.execute("SELECT to_regclass('awa_job'), to_regclass('awa_job_done')").fetchone()
    return [str(name) for name in found if name is not None]


def every_job(conn: Any) -> str:
    """Where every job is read: the view of both tables, once there is one."""
    return "awa_job_all" if conn.execute("SELECT to_regclass('awa_job_all')").fetchone()[0] else "awa_job"


def fill(n: int, kind: str, keep_history: bool) -> int:
    """n available jobs of ``kind`` in the bench queue, on empty, vacuumed job tables, or, with
    ``keep_history``, beside the finished jobs the database holds (only the bench queue's jobs
    deleted from awa_job); returns the first new job's id."""
    from awa_django.models import Job

    with connect() as conn:
        names = tables(conn)
        if keep_history:
            conn.execute("DELETE FROM awa_job WHERE queue = %s", [QUEUE])
            conn.execute("TRUNCATE demo_execution")
            names = ["awa_job"]
        else:
            conn.execute(f"TRUNCATE {', '.join(names)}, demo_execution")  # names from to_regclass of constants
        for name in names:
            conn.execute(f"VACUUM ANALYZE {name}")
    for start in range(0, n, 10_000):
        Job.objects.enqueue_many([{"kind": kind, "queue": QUEUE} for _ in range(min(10_000, n - start))])
    with connect() as conn:
        for name in names:
            conn.execute(f"VACUUM ANALYZE {name}")
        (first,) = conn.execute("SELECT min(id) FROM awa_job WHERE queue = %s", [QUEUE]).fetchone()
    return int(first)


def completed(conn: Any, table: str, first: int) -> int:
    """How many of the drain's jobs (ids from ``first``) are completed."""
    (done,) = conn.execute(f"SELECT count(*) FROM {table} WHERE id >= %s AND state = 'completed'", [first]).fetchone()
    return int(done)


STATEMENTS_SPENT = """
    SELECT calls, total_exec_time / calls * 1000 AS per_call, total_exec_time * 1000 / %(jobs)s AS per_job,
           rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 80) AS text
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    ORDER BY total_exec_time DESC
    LIMIT %(limit)s
"""


def reset_statements(conn: Any) -> None:
    """Start pg_stat_statements' counts afresh (--statements)."""
    if conn.execute("SELECT to_regproc('pg_stat_statements_reset')").fetchone()[0] is None:
        raise SystemExit("--statements: pg_stat_statements is not created in this database; see the docstring")
    conn.execute("SELECT pg_stat_statements_reset()")


def print_statements(conn: Any, jobs: int, label: str) -> None:
    """The statements the server spent most on since the reset, per call and per job (--statements)."""
    print(f"    {label}: calls | µs a call | µs a job | rows | statement", file=sys.stderr)
    for calls, per_call, per_job, rows, text in conn.execute(STATEMENTS_SPENT, {"jobs": jobs, "limit": 8}):
        print(f"    {calls:>8,} | {per_call:>9.0f} | {per_job:>8.1f} | {rows:>7,} | {text}", file=sys.stderr)


def drain(n: int, first: int, conn_max_age: int, sync_threads: int | None = None) -> tuple[float, float, float]:
    """Drain the n jobs with one awa_worker: (jobs/s over the database's span, the worker's CPU µs
    per job and the server's, both from 10 % of the jobs completed to the end)."""
    # AWA_DB_NAME: set by setup(). DEBUG off, as in production: with it Django records every query.
    env = dict(os.environ, PYTHONPATH=str(ROOT), DJANGO_DEBUG="false")
    with open(WORKER_LOG, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, __file__, AS_WORKER, str(conn_max_age), str(sync_threads or 0), "awa_worker", "-q", QUEUE],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + max(180.0, n / 50)
        mark: tuple[float, float, int] | None = None
        with connect() as conn:
            table = every_job(conn)
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"the worker exited with {proc.returncode}; see {WORKER_LOG}")
                if time.monotonic() > deadline:
                    raise SystemExit(f"the worker did not drain {n} jobs in time; see {WORKER_LOG}")
                done = completed(conn, table, first)
                if mark is None and done >= 0.1 * n:
                    mark = (cpu_seconds(proc.pid), server_cpu_seconds(), done)
                if done >= n:
                    break
                time.sleep(0.1)
            cpu, server = cpu_seconds(proc.pid), server_cpu_seconds()
            span, once = conn.execute(
                f"SELECT extract(epoch FROM max(finalized_at) - min(attempted_at)), "
                f"count(*) FILTER (WHERE attempt = 1) FROM {table} WHERE id >= %s",
                [first],
            ).fetchone()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if once != n:
        raise SystemExit(f"expected {n} jobs completed at their first attempt, found {once}")
    assert mark is not None
    jobs = max(n - mark[2], 1)
    return n / float(span), (cpu - mark[0]) / jobs * 1e6, (server - mark[1]) / jobs * 1e6


def run_worker(conn_max_age: int, sync_threads: int, argv: list[str]) -> None:
    """``manage.py ARGV`` with the default database's CONN_MAX_AGE set, and AWA["SYNC_THREADS"] when
    ``sync_threads`` is not 0 (the bench's worker)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from testproject import settings

    settings.DATABASES["default"]["CONN_MAX_AGE"] = conn_max_age
    if sync_threads:
        settings.AWA["SYNC_THREADS"] = sync_threads
    sys.argv = [str(ROOT / "manage.py"), *argv]
    runpy.run_path(str(ROOT / "manage.py"), run_name="__main__")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--conn-max-age", type=int, default=600, help="the worker's CONN_MAX_AGE (seconds)")
    parser.add_argument("--sync-threads", type=int, help="the worker's AWA['SYNC_THREADS'] (default: its default, 10)")
    parser.add_argument("--statements", action="store_true", help="print where the server spent, per drain")
    parser.add_argument(
        "--db", default=DB_NAME, help="another database, its finished jobs kept (e.g. awa_bench_history_5m)"
    )
    parser.add_argument(
        "--handler",
        choices=sorted(HANDLERS),
        default="noop",
        help="noop: does nothing; touch: writes one row; look: reads once, writes nothing",
    )
    args = parser.parse_args()
    setup(args.db)
    keep_history = args.db != DB_NAME
    kinds = HANDLERS[args.handler]
    got: dict[str, list[tuple[float, float, float]]] = {"plain": [], "atomic": []}
    for rep in range(args.reps):
        order = ("plain", "atomic") if rep % 2 == 0 else ("atomic", "plain")
        for which in order:
            first = fill(args.jobs, kinds[which], keep_history)
            if args.statements:
                with connect() as conn:
                    reset_statements(conn)
            got[which].append(drain(args.jobs, first, args.conn_max_age, args.sync_threads))
            if args.statements:
                with connect() as conn:
                    print_statements(conn, args.jobs, kinds[which])
        plain_rate, plain_cpu, plain_server = got["plain"][-1]
        atomic_rate, atomic_cpu, atomic_server = got["atomic"][-1]
        print(
            f"  rep {rep + 1} ({order[0]} first): plain={plain_rate:,.0f}/s ({plain_cpu:.0f} µs worker, "
            f"{plain_server:.0f} µs server CPU/job) atomic={atomic_rate:,.0f}/s ({atomic_cpu:.0f} µs worker, "
            f"{atomic_server:.0f} µs server CPU/job) ratio={atomic_rate / plain_rate:.2f}",
            file=sys.stderr,
            flush=True,
        )
    rate_ratios = [a[0] / p[0] for p, a in zip(got["plain"], got["atomic"], strict=True)]
    cpu_ratios = [a[1] / p[1] for p, a in zip(got["plain"], got["atomic"], strict=True)]
    print(
        f"{args.jobs:,} {args.handler} jobs per drain on {args.db}, {args.reps} alternated pairs, "
        f"CONN_MAX_AGE={args.conn_max_age}, SYNC_THREADS={args.sync_threads or 'default'}, medians:"
    )
    print("| drain | jobs/s | worker CPU per job, 10-100 % (µs) | server CPU per job (µs) |")
    print("| --- | ---: | ---: | ---: |")
    for which in ("plain", "atomic"):
        rate = statistics.median(r for r, _, _ in got[which])
        cpu = statistics.median(c for _, c, _ in got[which])
        server = statistics.median(s for _, _, s in got[which])
        print(f"| `{kinds[which]}` ({which}) | {rate:,.0f} | {cpu:.0f} | {server:.0f} |")
    print(f"| atomic ÷ plain (median of the paired ratios) | {statistics.median(rate_ratios):.2f} | "
          f"{statistics.median(cpu_ratios):.2f} | |")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == AS_WORKER:
        run_worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
    else:
        main()
