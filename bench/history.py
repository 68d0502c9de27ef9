"""The hot path against a big history, alternated with an empty database (issue 43).

    python bench/history.py compare --history 5560000 --pairs 3     # the issue's database, 3 pairs
    python bench/history.py compare --history 200000 --pairs 1      # quick check (a minute or two)
    python bench/history.py compare --history 5000000,10000000,20000000 --pairs 3   # the curve
    python bench/history.py prune --day 5000000 --pairs 1 --by bench,leader
    python bench/history.py drop                                   # drop this bench's databases

``compare`` builds (once; reused while its row counts match) a database with ``--history`` rows
shaped like the issue's: per 5,560,000 rows, 5,000,000 completed, 300,000 failed and 50,000
cancelled jobs finished over the last 24 hours, in awa_job_done's range partitions (created
first with the worker's own ``retention._create`` and ``ensure_partitions``, so no row lands in a
DEFAULT partition), and 200,000 scheduled and 10,000 retryable jobs due in the next day in awa_job;
40 kinds, 8 queues, args with a user id, an order and an email, two tags each, an error entry on
the failed rows. ``INSERT ... SELECT generate_series`` a million rows a statement, then VACUUM
ANALYZE, and the history rollup caught up (as a long-running leader leaves it). Beside it, an
empty database (``awa_bench_history_empty``).

Then ``--pairs`` times, the two databases in turn (empty first on odd pairs, history first on even
ones), on the same code, each run:

- **bulk**: ``Job.objects.enqueue_many`` of ``--jobs`` (50,000) no-op jobs in one call (COPY), timed
  in this process: jobs/s;
- **drain**: one ``manage.py awa_worker -q bench`` (queue row max_workers=32, as bench/run.py) until
  all of them are finished; the rate is N over the database's own span, from the first claim
  (``min(attempted_at)``) to the last completion (``max(finalized_at)``), read from awa_job_done;
- **pickup**: the same worker, now idle: ``--samples`` ``stamp`` jobs enqueued one at a time
  (autocommit) after a random 20-60 ms gap. Two measures of each: ``attempted_at - run_at``, the
  claim's start since the insert's (bench/pickup_tail.py's; it holds the enqueue's own commit,
  its WAL flush), and the handler's ``time.time()`` (its result) since the enqueue returned,
  bench/run.py's measure (after the commit, and with the claim's own commit). The enqueue call's
  own time is printed beside them: the commit's flush, which no worker takes part in;
- **SQL alone**: ``--jobs`` jobs enqueued again and drained by ``claim_jobs`` and ``complete_jobs``
  alone (one connection, claims of 32, each followed by its completion; no worker, no leader): the
  same span rate, to tell the hot path's SQL from the worker around it;
- **buffers**: in a rolled-back transaction, ``--batch`` available jobs inserted into awa_job, then
  ``EXPLAIN (ANALYZE, BUFFERS)`` of ``claim_jobs`` claiming them and of ``complete_jobs`` completing
  them (tests/test_storage.py's completion_buffers): shared blocks hit + read per job, the best of 3.

Each run starts from awa_job without the bench's jobs, vacuumed, in both databases (the hot table
churns alike in each), and the history rollup caught up (so the worker's new leader does not read
the previous run's jobs); the empty database's awa_job_done is emptied, the history database keeps
the bench's earlier jobs among its finished ones (50,000 a run: about 1 % of the history each).
Prints every pair, the median ratio history / empty of each measure, and the partitions' and
indexes' sizes.

``prune`` builds ``awa_bench_history_prune``: ``--day`` completed jobs finished yesterday, in
yesterday's range partition, and today's partitions as the worker makes them. Each pair drains
``--jobs`` jobs twice: without pruning, then with ``retention.drop_expired`` (this process, its own
connection, a retention short enough that yesterday is past it; the worker's leader keeps the
default day, so it drops nothing itself) started once a third of the jobs are done. At that moment
a probe job is enqueued in queue ``probe`` (the worker serves it too) to run 1 s later: its
promotion lag is ``attempted_at - run_at`` (the leader promotes every maintenance interval, 0.5 s;
the poll interval is 1 s). Reported: the lock hold the retention logs, the drop's wall time, both
drains' rates over their whole span and over the 3 s from the drop's start (the same offset in the
run without), and both probes' lags. Each pair after the first builds the day again.

The databases are ``awa_bench_history_*`` on the embedded server (or DATABASE_URL's server); a
5.5 M-row history takes about 4 GB of disk: ``drop`` removes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ.setdefault("DJANGO_DEBUG", "false")  # no query log in this process

PREFIX = "awa_bench_history_"
EMPTY = PREFIX + "empty"
HISTORY = PREFIX + "big"
PRUNE = PREFIX + "prune"
QUEUE = "bench"
PROBE_QUEUE = "probe"
CHUNK = 1_000_000
WORKER_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / "awa_bench_history_worker.log"
# The mix, per 5,560,000 rows.
MIX = {"completed": 5_000_000, "failed": 300_000, "cancelled": 50_000, "scheduled": 200_000, "retryable": 10_000}
MIX_TOTAL = sum(MIX.values())

# Finished jobs, straight into awa_job_done (the partition of their finish time, over the last 24 h).
BUILD_DONE = """
INSERT INTO awa_job_done (id, kind, queue, args, state, priority, attempt, max_attempts, run_at, attempted_at,
                          attempted_by, finalized_at, created_at, errors, metadata, tags, run_lease, fair_key, pending)
SELECT nextval(pg_get_serial_sequence('awa_job', 'id')),
       'kind.' || (g %% 40),
       'q' || (g %% 8),
       jsonb_build_object('user_id', g %% 100000, 'email', 'user' || (g %% 100000) || '@example.com',
                          'order', jsonb_build_object('id', g, 'total', (g %% 10000) / 100.0)),
       %(state)s::varchar,
       1 + g %% 4,
       CASE WHEN %(state)s = 'failed' THEN 25 ELSE 1 END,
       25,
       t.finished - interval '2 second',
       t.finished - interval '1 second',
       'bench-host:' || (g %% 4),
       t.finished,
       t.finished - interval '3 second',
       CASE WHEN %(state)s = 'failed'
            THEN jsonb_build_array(jsonb_build_object('error', 'KeyError: ''template ' || (g %% 20) || '''',
                                                      'attempt', 25, 'at', t.finished))
            ELSE '[]'::jsonb END,
       '{}'::jsonb,
       ARRAY['tenant-' || (g %% 50), 'bench'],
       1, '', 0
FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS g,
LATERAL (SELECT %(end)s::timestamptz - interval '1 millisecond' * ((g * 7919) %% %(span_ms)s::bigint)
         AS finished) AS t
"""

# Waiting jobs in awa_job, due over the next day (not promoted while the bench runs).
BUILD_HOT = """
INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, errors,
                     metadata, tags, run_lease, fair_key, pending)
SELECT 'kind.' || (g %% 40), 'q' || (g %% 8),
       jsonb_build_object('user_id', g %% 100000, 'order', jsonb_build_object('id', g)),
       %(state)s::varchar, 1 + g %% 4,
       CASE WHEN %(state)s = 'retryable' THEN 1 ELSE 0 END, 25,
       now() + interval '1 hour' + interval '1 second' * ((g * 7919) %% 86400),
       now() - interval '1 minute',
       CASE WHEN %(state)s = 'retryable'
            THEN jsonb_build_array(jsonb_build_object('error', 'TimeoutError', 'attempt', 1, 'at', now()))
            ELSE '[]'::jsonb END,
       '{}'::jsonb, ARRAY['tenant-' || (g %% 50), 'bench'],
       CASE WHEN %(state)s = 'retryable' THEN 1 ELSE 0 END, '', 0
FROM generate_series(1, %(n)s::bigint) AS g
"""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- Databases ------------------------------------------------------------------------------------


def conninfo(name: str) -> dict[str, Any]:
    from django.conf import settings

    from bench.mvcc import conninfo as info

    return info(settings.DATABASES["default"], name)


def connect(name: str | None = None) -> Any:
    import psycopg
    from django.conf import settings

    return psycopg.connect(**conninfo(name or settings.DATABASES["default"]["NAME"]), autocommit=True)


def use(name: str) -> None:
    """Point this process (Django's default connection) and the workers it starts at ``name``."""
    from django.db import connection

    connection.close()
    connection.settings_dict["NAME"] = name  # the same dict as settings.DATABASES["default"]
    os.environ["AWA_DB_NAME"] = name


def exists(name: str) -> bool:
    with connect("postgres") as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None


def prepare(name: str) -> None:
    """Create (once) and migrate ``name``; this process then uses it."""
    from django.core.management import call_command

    if not exists(name):
        with connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    use(name)
    call_command("migrate", verbosity=0, interactive=False)
    from awa_django.models import Queue

    Queue.objects.update_or_create(name=QUEUE, defaults={"max_workers": 32})


def run_async(function: Any, *args: Any) -> Any:
    """``function(conn, *args)`` on a worker-style async connection to the current database."""
    from awa_django.worker.db import connect as connect_async

    async def main() -> Any:
        conn = await connect_async("default", purpose="bench")
        try:
            return await function(conn, *args)
        finally:
            await conn.close()

    return asyncio.run(main())


# The compare's workers keep completed jobs two days: the same hour partitions as the default day
# (retention.width_for), and a leader that drops none of the history's last 24 hours while the
# bench measures (with the default day, each hour's oldest partition would go during the runs).
KEEP = 2 * 86_400.0


def default_config(completed_retention: float | None = None) -> Any:
    """The worker's configuration with the default retentions (or a completed one given)."""
    from awa_django import defaults
    from awa_django.worker.config import QueueConfig, WorkerConfig

    return WorkerConfig(
        queues={QUEUE: QueueConfig(QUEUE)},
        completed_retention=completed_retention or defaults.COMPLETED_RETENTION_DEFAULT,
        failed_retention=defaults.FAILED_RETENTION_DEFAULT,
    )


async def _drop_partitions(conn: Any) -> None:
    from awa_django.worker import retention

    for found in (await retention.list_partitions(conn)).values():
        for partition in found:
            await conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(partition.name)))


async def _ensure(conn: Any) -> None:
    """The partitions a worker with the default retentions makes: today's and ahead."""
    from awa_django.worker import retention

    await retention.ensure_partitions(conn, default_config())


async def _create_range(conn: Any, lower: datetime, upper: datetime, branches: tuple[str, ...]) -> None:
    from awa_django.worker import retention

    for branch in retention.BRANCHES:
        if branch.table in branches and not await retention._create(conn, branch, lower, upper):
            raise SystemExit(f"could not create {branch.table}'s partition [{lower}, {upper})")


def empty_all(conn: Any) -> None:
    conn.execute("TRUNCATE awa_job, awa_job_done, awa_job_edge, awa_history, awa_history_mark")


def insert_done(conn: Any, state: str, start: int, rows: int, end: datetime, span: timedelta) -> None:
    """Finished jobs ``start`` to ``rows`` of ``state`` (their args follow the number), finished
    over the ``span`` before ``end``."""
    started = time.monotonic()
    for first in range(start, rows + 1, CHUNK):
        last = min(first + CHUNK - 1, rows)
        conn.execute(
            BUILD_DONE,
            {"state": state, "first": first, "last": last, "end": end, "span_ms": int(span.total_seconds() * 1000)},
        )
        log(f"  {state}: {last:,} of {rows:,} rows in {time.monotonic() - started:,.0f} s")


def mix(rows: int) -> dict[str, int]:
    """The issue's mix scaled to ``rows``; the waiting jobs (scheduled, retryable) stop growing at the
    issue's 210,000: past 5.56 M rows only the history grows (the curve)."""
    scale = rows / MIX_TOTAL
    counts = {state: round(share * scale) for state, share in MIX.items()}
    for state in ("scheduled", "retryable"):
        counts[state] = min(counts[state], MIX[state])
    return counts


async def _history_partitions(conn: Any, since: datetime, width: timedelta | None) -> None:
    """Both branches' range partitions from ``since`` on, where missing: each of ``width``, or (None)
    of the width a worker with the default retentions makes (``retention.width_for``), up to the
    current one; ``_ensure`` then makes the ones ahead."""
    from awa_django.worker import retention

    config = default_config()
    existing = await retention.list_partitions(conn)
    now = datetime.now(UTC)
    for branch in retention.BRANCHES:
        step = width or retention.width_for(retention.branch_retention(branch, config))
        lower = retention.floor_to(since, step)
        while lower <= now:
            if not any(p.lower <= lower < p.upper for p in existing[branch.table]):
                await _create_range(conn, lower, lower + step, (branch.table,))
            lower += step


def build_history(
    rows: int, rebuild: bool, name: str = HISTORY, today: bool = False, width: timedelta | None = None
) -> str:
    """The history database with ``rows`` rows of the issue's mix: reused when it holds them, grown
    when it holds fewer (the new finished jobs spread over the last 24 hours like the first ones),
    built from nothing otherwise (or with ``rebuild``). With ``today``, the finished jobs are spread
    over today (UTC) up to three minutes ago instead: all of them in the day's current partitions,
    which the bench's completions go to, as on a busy site late in the day. ``width``: the range
    partitions' width (None: the worker's own, ``retention.width_for``; a day, as the worker made
    them until 2026-12-06, to compare)."""
    prepare(name)
    counts = mix(rows)
    shape = {"width_hours": width / timedelta(hours=1) if width else 0, "today": today}
    with connect() as conn:
        marker = conn.execute("SELECT obj_description('awa_job_done'::regclass)").fetchone()[0]
        have = json.loads(marker) if marker and marker.startswith("{") else None
        built_shape = {key: have.pop(key, None) for key in shape} if have is not None else None
        if have == counts and built_shape == shape and not rebuild:
            log(f"reusing {name} ({counts}, {shape})")
            return name
        if rebuild or have is None or built_shape != shape or any(have[state] > counts[state] for state in counts):
            log(f"building {name}: {counts}")
            empty_all(conn)
            run_async(_drop_partitions)
            have = dict.fromkeys(counts, 0)
        else:
            log(f"growing {name} from {have} to {counts}")
    started = time.monotonic()
    # Partitions first, as the worker makes them (or of --width), over the rows' span, and ahead.
    now = datetime.now(UTC)
    today_start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    run_async(_history_partitions, today_start if today else now - timedelta(days=1), width)
    run_async(_ensure)
    with connect() as conn:
        end, span = now, timedelta(days=1)
        if today:  # up to three minutes ago: the rollup's open minutes hold none of them
            end = now - timedelta(minutes=3)
            span = end - today_start
            if span < timedelta(minutes=1):
                raise SystemExit(f"--today needs a day begun at least 4 minutes ago (it is {now:%H:%M} UTC)")
        for state in ("completed", "failed", "cancelled"):
            insert_done(conn, state, have[state] + 1, counts[state], end, span)
        with conn.transaction():
            conn.execute("SET LOCAL awa.notify_by_caller = 'on'")  # nobody listens to these
            for state in ("scheduled", "retryable"):
                conn.execute(BUILD_HOT, {"state": state, "n": counts[state] - have[state]})
        in_default = conn.execute(
            "SELECT (SELECT count(*) FROM awa_job_done_completed_default)"
            " + (SELECT count(*) FROM awa_job_done_failed_default)"
        ).fetchone()[0]
        if in_default:
            raise SystemExit(f"{in_default} history rows landed in a DEFAULT partition; the ranges are wrong")
        log(f"  inserted in {time.monotonic() - started:,.0f} s; VACUUM ANALYZE")
        conn.execute("VACUUM ANALYZE")
    roll_up()
    with connect() as conn:
        conn.execute(
            sql.SQL("COMMENT ON TABLE awa_job_done IS {}").format(sql.Literal(json.dumps({**counts, **shape})))
        )
        log(f"  built in {time.monotonic() - started:,.0f} s")
    return name


def roll_up() -> None:
    """The history rollup caught up, as a leader that has run for a while leaves it: otherwise the
    first worker on the history database spends its first minutes rolling up its 24 hours (the
    issue's "new leader's catch-up", measured on its own in bench/console_pages.py)."""
    from awa_django.worker.history import roll_up_history

    async def rounds(conn: Any) -> int:
        n = 1
        while (await roll_up_history(conn)).catching_up:
            n += 1
        return n

    started = time.monotonic()
    n = run_async(rounds)
    log(f"  history rollup caught up in {n} rounds, {time.monotonic() - started:,.0f} s")


def build_empty() -> str:
    prepare(EMPTY)
    run_async(_ensure)
    return EMPTY


# -- One run --------------------------------------------------------------------------------------


def start_worker(
    *queues: str, completed_retention: float | None = None, log_path: Path = WORKER_LOG
) -> subprocess.Popen[bytes]:
    """``manage.py awa_worker -q ...`` on the current database; with ``completed_retention``, the
    same command through this script (``_worker``), which sets AWA["COMPLETED_RETENTION"] first."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if completed_retention is None:
        command = [sys.executable, str(ROOT / "manage.py"), "awa_worker"]
    else:
        command = [sys.executable, str(Path(__file__).resolve()), "_worker", str(completed_retention), "awa_worker"]
    for queue in queues:
        command += ["-q", queue]
    with open(log_path, "ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def worker_main(argv: list[str]) -> None:
    """``history.py _worker SECONDS awa_worker ARGS...``: manage.py's command with the completed
    jobs' retention set to SECONDS in the settings (the worker reads it from there)."""
    from django.conf import settings
    from django.core.management import execute_from_command_line

    settings.AWA = {**getattr(settings, "AWA", {}), "COMPLETED_RETENTION": float(argv[0])}
    execute_from_command_line(["manage.py", *argv[1:]])


def stop_worker(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def clean(empty: bool) -> None:
    """awa_job without the bench's jobs, vacuumed (both databases alike: the hot table churns the
    same way in each); the empty database's finished jobs emptied."""
    with connect() as conn:
        conn.execute("DELETE FROM awa_job WHERE queue IN (%s, %s, 'buffers')", [QUEUE, PROBE_QUEUE])
        if empty:
            conn.execute("TRUNCATE awa_job_done")
        conn.execute("VACUUM ANALYZE awa_job")
    # The rollup caught up on what the last run finished: else the worker's new leader reads the
    # previous run's jobs during this drain, in the history database only (the empty one's are gone).
    roll_up()


def bulk(n: int, vacuum: bool = True) -> tuple[float, int, int]:
    """enqueue_many of n no-op jobs (COPY, one call); its rate and the ids' range. ``vacuum``: then
    VACUUM ANALYZE awa_job (before a worker starts; not while one drains them)."""
    from awa_django.models import Job

    with connect() as conn:
        (after,) = conn.execute("SELECT nextval(pg_get_serial_sequence('awa_job', 'id'))").fetchone()
    started = time.perf_counter()
    Job.objects.enqueue_many([{"kind": "noop", "queue": QUEUE, "args": {"seq": i}} for i in range(n)])
    seconds = time.perf_counter() - started
    with connect() as conn:
        # awa_job_all: a worker already running has finished some of them
        count, low, high = conn.execute(
            "SELECT count(*), min(id), max(id) FROM awa_job_all WHERE id > %s AND queue = %s", [after, QUEUE]
        ).fetchone()
        if vacuum:
            conn.execute("VACUUM ANALYZE awa_job")  # as floor.fill does before a drain
    if count != n:
        raise SystemExit(f"enqueued {n} jobs, found {count}")
    return n / seconds, low, high


def wait_until(predicate: Any, timeout: float, proc: subprocess.Popen[bytes] | None, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the worker exited ({proc.returncode}) before {what}; see {WORKER_LOG}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.25)


def left(conn: Any) -> int:
    """The bench's jobs not finished yet: available or running in the hot table (two partial
    indexes; the same cost in both databases, whatever else awa_job holds)."""
    (n,) = conn.execute(
        "SELECT (SELECT count(*) FROM awa_job WHERE queue = %(q)s AND state = 'available')"
        " + (SELECT count(*) FROM awa_job WHERE queue = %(q)s AND state = 'running')",
        {"q": QUEUE},
    ).fetchone()
    return int(n)


def span_rate(conn: Any, n: int, low: int, high: int) -> tuple[float, datetime]:
    """n over the span from the first claim to the last completion, after checking every one of
    the jobs completed once; and the first claim's moment."""
    done, once, first, span = conn.execute(
        "SELECT count(*) FILTER (WHERE state = 'completed'), count(*) FILTER (WHERE attempt = 1),"
        " min(attempted_at), extract(epoch FROM max(finalized_at) - min(attempted_at))"
        " FROM awa_job_done WHERE id BETWEEN %s AND %s AND queue = %s",
        [low, high, QUEUE],
    ).fetchone()
    if done != n or once != n:
        raise SystemExit(f"expected {n} jobs completed once, found {done} completed and {once} with attempt 1")
    return n / float(span), first


@dataclass
class Pickups:
    """Each sample's three times, ms: the claim's start since the insert's (``attempted_at -
    run_at``, the enqueue's commit inside it), the handler's start since the enqueue returned (after
    its commit: bench/run.py's pickup), and the enqueue call itself (the insert and its commit)."""

    claim: list[float] = field(default_factory=list)
    handler: list[float] = field(default_factory=list)
    enqueue: list[float] = field(default_factory=list)
    at: list[float] = field(default_factory=list)  # each sample's enqueue call, time.time(), in claim's order
    beside: list[bool] = field(default_factory=list)  # each sample met a big vacuum or analyze (Upkeep)

    def apart(self, values: list[float]) -> list[float]:
        """``values`` (claim or handler: one per sample) without the samples beside upkeep."""
        return [value for value, met in zip(values, self.beside, strict=True) if not met]


def pickup(conn: Any, samples: int, proc: subprocess.Popen[bytes]) -> Pickups:
    """One ``stamp`` job at a time into the idle worker; each one's three times (``Pickups``)."""
    from awa_django.models import Job

    returned: dict[int, float] = {}
    called_at: dict[int, float] = {}
    got = Pickups()
    for _ in range(samples):
        time.sleep(random.uniform(0.02, 0.06))
        called = time.time()
        job_id = Job.objects.enqueue("stamp", queue=QUEUE).pk
        returned[job_id] = time.time()
        called_at[job_id] = called
        got.enqueue.append((returned[job_id] - called) * 1000)
    wait_until(lambda: left(conn) == 0, 60, proc, "the pickup samples' completion")
    rows = conn.execute(
        "SELECT id, extract(epoch FROM attempted_at - run_at) * 1000, result"
        " FROM awa_job_all WHERE id = ANY(%s) AND state = 'completed'",
        [list(returned)],
    ).fetchall()
    if len(rows) != samples:
        raise SystemExit(f"{samples} pickup samples enqueued, {len(rows)} completed")
    for job_id, claim_ms, started in rows:
        got.claim.append(float(claim_ms))
        got.handler.append((float(started) - returned[job_id]) * 1000)
        got.at.append(called_at[job_id])
    return got


class Upkeep:
    """What the server's autovacuum workers did while the bench ran: every ``EVERY`` seconds,
    each worker's database and command (``pg_stat_activity``, all databases), on its own thread.

    A vacuum or an analyze of a table of the history (``awa_job_done`` partitions) over
    ``BIG_MB`` takes a core and writes WAL for seconds (bench/README.md, "Vacuuming a history
    partition in fixed batches"); the pickups beside one are counted apart, so that a pair can be
    read with and without the database's upkeep of its history. (It reads other sessions' commands:
    the bench connects as a superuser, as on the embedded server.)"""

    EVERY = 0.1
    BIG_MB = 100

    def __init__(self) -> None:
        self.seen: list[tuple[float, str, str]] = []  # (time.time(), database, table)
        self.big: set[tuple[str, str]] = set()  # (database, table) over BIG_MB
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="upkeep", daemon=True)

    def __enter__(self) -> Upkeep:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with connect("postgres") as conn:
            while not self._stop.wait(self.EVERY):
                for database, query in conn.execute(
                    "SELECT datname, query FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
                ):
                    match = re.search(r"(awa_job_done\w*)", query or "")
                    if match:
                        self.seen.append((time.time(), database, match.group(1)))

    def note_sizes(self, database: str) -> None:
        """Which of ``database``'s history tables are big (read once a run: they grow)."""
        with connect(database) as conn:
            for (table,) in conn.execute(
                "SELECT relname FROM pg_class WHERE relname LIKE 'awa_job_done%%' AND relkind = 'r' "
                "AND pg_total_relation_size(oid) > %s",
                [self.BIG_MB * 1024 * 1024],
            ):
                self.big.add((database, table))

    def during(self, start: float, end: float) -> list[str]:
        """The big history tables an autovacuum worker was seen on between ``start`` and ``end``."""
        return sorted(
            {f"{db}.{table}" for at, db, table in self.seen if start <= at <= end and (db, table) in self.big}
        )

    def mark(self, pickups: Pickups) -> None:
        """Each sample: beside a big table's vacuum or analyze (seen within two sampling steps of it)?"""
        windows = sorted(at for at, db, table in self.seen if (db, table) in self.big)
        pickups.beside = [
            any(at - 2 * self.EVERY <= seen <= at + 2 * self.EVERY for seen in windows) for at in pickups.at
        ]


BUFFERS_ROWS = """
INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at, errors,
                     metadata, tags, run_lease, fair_key, pending)
SELECT 'noop', 'buffers', jsonb_build_object('seq', g), 'available', 2, 0, 25, now() - interval '1 second', now(),
       '[]', '{}', '{}', 0, '', 0
FROM generate_series(1, %s) AS g
"""


def plan_blocks(conn: Any, statement: str, params: dict[str, Any]) -> tuple[int, int]:
    plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, params).fetchone()[0][0]["Plan"]
    return int(plan["Shared Hit Blocks"]), int(plan["Shared Read Blocks"])


@dataclass
class Buffers:
    claim: float  # shared blocks hit + read per job
    claim_read: float
    complete: float
    complete_read: float


def buffers(batch: int) -> Buffers:
    """claim_jobs then complete_jobs on ``batch`` fresh jobs, rolled back; the best of 3."""
    from awa_django.sql import statements
    from awa_django.worker.lanes import LaneCursors

    best: Buffers | None = None
    for _ in range(3):
        with connect() as conn, conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL awa.notify_by_caller = 'on'")
            conn.execute(BUFFERS_ROWS, [batch])
            params = {"queue": "buffers", "limit": batch, "deadline": None, "worker": "bench:0"}
            params.update(LaneCursors().params())
            claim = plan_blocks(conn, statements["claim_jobs"], params)
            ids = [r[0] for r in conn.execute("SELECT id FROM awa_job WHERE queue = 'buffers'").fetchall()]
            complete = plan_blocks(conn, statements["complete_jobs"], {"ids": ids, "leases": [1] * len(ids)})
            (moved,) = conn.execute("SELECT count(*) FROM awa_job_done WHERE queue = 'buffers'").fetchone()
            if len(ids) != batch or moved != batch:
                raise SystemExit(f"the buffers batch: {len(ids)} claimed, {moved} completed, of {batch}")
        got = Buffers(sum(claim) / batch, claim[1] / batch, sum(complete) / batch, complete[1] / batch)
        if best is None or got.claim + got.complete < best.claim + best.complete:
            best = got
    assert best is not None
    return best


@dataclass
class Run:
    database: str
    bulk: float
    drain: float
    floor: float  # the same drain by claim_jobs + complete_jobs alone
    buffers: Buffers
    pickups: Pickups = field(default_factory=Pickups)  # every sample, ms
    upkeep: list[str] = field(default_factory=list)  # big history tables vacuumed or analyzed during the run

    @property
    def p50(self) -> float:  # the claim since the insert
        return percentile(self.pickups.claim, 0.5)

    @property
    def p99(self) -> float:
        return percentile(self.pickups.claim, 0.99)

    @property
    def p99_handler(self) -> float:
        return percentile(self.pickups.handler, 0.99)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def run_once(name: str, n: int, samples: int, batch: int, upkeep: Upkeep) -> Run:
    use(name)
    clean(empty=name == EMPTY)
    started = time.time()
    rate_bulk, low, high = bulk(n)
    worker = start_worker(QUEUE, completed_retention=KEEP)
    try:
        with connect() as conn:
            wait_until(lambda: left(conn) == 0, max(300.0, n / 100), worker, f"the drain of {n} jobs")
            rate_drain, _ = span_rate(conn, n, low, high)
            times = pickup(conn, samples, worker)
    finally:
        stop_worker(worker)
    upkeep.mark(times)
    met = upkeep.during(started, time.time())
    clean(empty=name == EMPTY)
    _, low, high = bulk(n)
    rate_floor = floor_drain(n, low, high)
    return Run(name, rate_bulk, rate_drain, rate_floor, buffers(batch), times, met)


def floor_drain(n: int, low: int, high: int, batch: int = 32) -> float:
    """Drain the n jobs with the worker's claim_jobs and complete_jobs alone, one connection, a
    claim of ``batch`` then its completion, the lane cursors kept as a dispatcher keeps them (no
    worker, no leader, no handler): the hot path's SQL, the same span rate."""
    from awa_django.context import claimed_job_row
    from awa_django.sql import statements
    from awa_django.worker.lanes import LaneCursors

    lanes = LaneCursors()
    with connect() as conn:
        claims = conn.cursor(row_factory=claimed_job_row)
        while True:
            sent = {"queue": QUEUE, "limit": batch, "deadline": None, "worker": "floor:0", **lanes.params()}
            rows = claims.execute(statements["claim_jobs"], sent, prepare=True).fetchall()
            if not rows:
                break
            lanes.advance(rows, sent)
            conn.execute(
                statements["complete_jobs"],
                {"ids": [r.id for r in rows], "leases": [r.run_lease for r in rows]},
                prepare=True,
            )
        rate, _ = span_rate(conn, n, low, high)
    return rate


# -- Reports --------------------------------------------------------------------------------------


def sizes(name: str) -> tuple[float, float]:
    """Print each table's and index's size: awa_job, and awa_job_done's leaf partitions. Return
    awa_job_done's heap and indexes, in GB."""
    with connect(name) as conn:
        rows = conn.execute(
            """
            SELECT c.relname, c.reltuples::bigint, pg_table_size(c.oid), pg_indexes_size(c.oid)
            FROM pg_class AS c
            WHERE c.oid = 'awa_job'::regclass
               OR c.oid IN (SELECT relid FROM pg_partition_tree('awa_job_done') WHERE isleaf)
            ORDER BY c.relname = 'awa_job' DESC, c.relname
            """
        ).fetchall()
        # Each index once: awa_job's, and the partitioned indexes of awa_job_done or of one branch
        # (the error text's, on the failed one) summed over their partitions.
        indexes = conn.execute(
            """
            SELECT x.indrelid::regclass::text, i.relname,
                   CASE WHEN i.relkind = 'I'
                        THEN (SELECT sum(pg_relation_size(t.relid)) FROM pg_partition_tree(i.oid) AS t)
                        ELSE pg_relation_size(i.oid) END
            FROM pg_class AS i
            JOIN pg_index AS x ON x.indexrelid = i.oid
            WHERE x.indrelid IN ('awa_job'::regclass, 'awa_job_done'::regclass,
                                 'awa_job_done_completed'::regclass, 'awa_job_done_failed'::regclass)
              AND NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = i.oid)
            ORDER BY 3 DESC
            """
        ).fetchall()
    mb = 1024 * 1024
    print(f"\nsizes in {name}:")
    print("| table | rows (estimate) | heap MB | indexes MB |")
    print("| --- | ---: | ---: | ---: |")
    for relname, tuples, heap, index in rows:
        print(f"| {relname} | {max(tuples, 0):,} | {heap / mb:,.1f} | {index / mb:,.1f} |")
    print("\n| index | on | MB (all partitions) |\n| --- | --- | ---: |")
    for table, relname, size in indexes:
        print(f"| {relname} | {table} | {int(size) / mb:,.1f} |")
    done = [r for r in rows if r[0] != "awa_job"]
    return sum(r[2] for r in done) / 1024**3, sum(r[3] for r in done) / 1024**3


def pooled_cells(pooled: list[list[float]]) -> list[str]:
    """p50, p95 and p99 of the empty side's samples and the history's (``pooled``), and their ratio."""
    return [
        f"p{round(q * 100)} {percentile(pooled[0], q):.2f} / {percentile(pooled[1], q):.2f} "
        f"({percentile(pooled[1], q) / percentile(pooled[0], q):.2f})"
        for q in (0.5, 0.95, 0.99)
    ]


def report_pairs(rows: int, runs: list[tuple[Run, Run]]) -> dict[str, float]:
    """Print the pairs and the median ratios; return the medians."""
    print(f"\nhistory {rows:,} rows against empty, {len(runs)} pairs (history / empty):")
    print(
        "| pair | drain jobs/s empty / history | bulk jobs/s empty / history | pickup p50 ms empty / history "
        "| pickup p99 ms empty / history | to the handler, p99 ms | claim buffers/job | completion buffers/job "
        "| SQL alone jobs/s |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, (e, h) in enumerate(runs, 1):
        print(
            f"| {i} | {e.drain:,.0f} / {h.drain:,.0f} ({h.drain / e.drain:.2f}) "
            f"| {e.bulk:,.0f} / {h.bulk:,.0f} ({h.bulk / e.bulk:.2f}) | {e.p50:.2f} / {h.p50:.2f} "
            f"| {e.p99:.2f} / {h.p99:.2f} ({h.p99 / e.p99:.2f}) "
            f"| {e.p99_handler:.2f} / {h.p99_handler:.2f} ({h.p99_handler / e.p99_handler:.2f}) "
            f"| {e.buffers.claim:.1f} / {h.buffers.claim:.1f} | {e.buffers.complete:.1f} / {h.buffers.complete:.1f} "
            f"| {e.floor:,.0f} / {h.floor:,.0f} ({h.floor / e.floor:.2f}) |"
        )
    medians = {
        "drain": statistics.median(h.drain / e.drain for e, h in runs),
        "floor": statistics.median(h.floor / e.floor for e, h in runs),
        "bulk": statistics.median(h.bulk / e.bulk for e, h in runs),
        "p50": statistics.median(h.p50 / e.p50 for e, h in runs),
        "p99": statistics.median(h.p99 / e.p99 for e, h in runs),
        "p99_handler": statistics.median(h.p99_handler / e.p99_handler for e, h in runs),
        "claim": statistics.median(h.buffers.claim / e.buffers.claim for e, h in runs),
        "complete": statistics.median(h.buffers.complete / e.buffers.complete for e, h in runs),
    }
    print("\n| measure | empty (median) | history (median) | ratio history / empty (median of pairs) | target |")
    print("| --- | ---: | ---: | ---: | --- |")
    col: dict[str, tuple[str, Callable[[Run], float], str, str]] = {
        "drain": ("drain, jobs/s", lambda r: r.drain, "{:,.0f}", ">= 0.95"),
        "floor": ("the same drain, claim_jobs + complete_jobs alone, jobs/s", lambda r: r.floor, "{:,.0f}", ""),
        "bulk": ("bulk enqueue, jobs/s", lambda r: r.bulk, "{:,.0f}", ">= 0.95"),
        "p50": ("pickup p50 (claim since insert), ms", lambda r: r.p50, "{:.2f}", ""),
        "p99": ("pickup p99 (claim since insert), ms", lambda r: r.p99, "{:.2f}", "<= 1.10"),
        "p99_handler": ("pickup p99 (handler since the enqueue returned), ms", lambda r: r.p99_handler, "{:.2f}", ""),
        "claim": ("claim, shared buffers per job", lambda r: r.buffers.claim, "{:.1f}", ""),
        "complete": ("completion, shared buffers per job", lambda r: r.buffers.complete, "{:.1f}", ""),
    }
    for key, (label, get, fmt, target) in col.items():
        empty = statistics.median(get(p[0]) for p in runs)
        history = statistics.median(get(p[1]) for p in runs)
        print(f"| {label} | {fmt.format(empty)} | {fmt.format(history)} | {medians[key]:.2f} | {target} |")
    # One pair's p99 is its 1 % slowest pickups: a few samples, which a burst of the machine's other
    # work moves by half. Pooled over every pair, each side's percentiles rest on pairs x samples.
    measures: dict[str, Callable[[Run], list[float]]] = {
        "pickup, claim since insert": lambda r: r.pickups.claim,
        "pickup, handler since the enqueue returned": lambda r: r.pickups.handler,
        "the enqueue call (insert + commit)": lambda r: r.pickups.enqueue,
    }
    for label, values in measures.items():
        pooled = [[ms for pair in runs for ms in values(pair[i])] for i in (0, 1)]
        if not all(pooled):
            continue
        cells = pooled_cells(pooled)
        side = f"{len(pooled[0]):,} a side"
        print(f"({label}, every pair's samples pooled, {side}, ms empty / history: {'; '.join(cells)})")
    # The same, without the samples taken beside a vacuum or an analyze of a big history table
    # (Upkeep): the hot path's own cost, apart from the database's upkeep of what it keeps.
    beside = [sum(pair[i].pickups.beside) for pair in runs for i in (0, 1)]
    if any(beside):
        parts: dict[str, Callable[[Run], list[float]]] = {
            "pickup, claim since insert": lambda r: r.pickups.apart(r.pickups.claim),
            "pickup, handler since the enqueue returned": lambda r: r.pickups.apart(r.pickups.handler),
        }
        for label, part in parts.items():
            pooled = [[ms for pair in runs for ms in part(pair[i])] for i in (0, 1)]
            if not all(pooled):  # every sample of a side met upkeep
                continue
            cells = pooled_cells(pooled)
            print(
                f"({label}, pooled without the {sum(beside[0::2]):,} / {sum(beside[1::2]):,} samples taken beside "
                f"a vacuum or analyze of a history table over {Upkeep.BIG_MB} MB, ms empty / history: "
                f"{'; '.join(cells)})"
            )
    else:
        print(f"(no pickup sample was taken beside a vacuum or analyze of a history table over {Upkeep.BIG_MB} MB)")
    reads = statistics.median(h.buffers.claim_read + h.buffers.complete_read for _, h in runs)
    print(f"(blocks read from outside shared buffers per job, claim + completion, history: {reads:.2f})")
    return medians


def compare(args: argparse.Namespace) -> None:
    curve: list[tuple[int, dict[str, float], list[tuple[Run, Run]], tuple[float, float]]] = []
    build_empty()
    for rows in args.history:
        width = timedelta(hours=args.width) if args.width else None
        name = build_history(rows, args.rebuild, args.database, args.today, width)
        runs: list[tuple[Run, Run]] = []
        for pair in range(args.pairs):
            order = [EMPTY, name] if pair % 2 == 0 else [name, EMPTY]
            with Upkeep() as upkeep:
                for db in (EMPTY, name):
                    upkeep.note_sizes(db)
                got = {db: run_once(db, args.jobs, args.samples, args.batch, upkeep) for db in order}
            runs.append((got[EMPTY], got[name]))
            e, h = got[EMPTY], got[name]
            log(
                f"  pair {pair + 1}: drain {e.drain:,.0f} / {h.drain:,.0f}, "
                f"SQL alone {e.floor:,.0f} / {h.floor:,.0f}, bulk {e.bulk:,.0f} / {h.bulk:,.0f}, "
                f"p99 {e.p99:.2f} / {h.p99:.2f} ms, buffers claim {e.buffers.claim:.1f} / {h.buffers.claim:.1f}, "
                f"completion {e.buffers.complete:.1f} / {h.buffers.complete:.1f}, "
                f"big history tables vacuumed or analyzed during the run: {', '.join(e.upkeep) or 'none'} / "
                f"{', '.join(h.upkeep) or 'none'}"
            )
        medians = report_pairs(rows, runs)
        curve.append((rows, medians, runs, sizes(name)))
    sizes(EMPTY)
    if len(curve) > 1:
        print("\ncurve (medians; ratios history / empty, paired):")
        print(
            "| history rows | awa_job_done heap / indexes GB | drain jobs/s | drain ratio | bulk ratio "
            "| pickup p99 ratio | claim buffers/job | completion buffers/job |"
        )
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for rows, medians, runs, (heap, index) in curve:
            print(
                f"| {rows:,} | {heap:.2f} / {index:.2f} | {statistics.median(h.drain for _, h in runs):,.0f} "
                f"| {medians['drain']:.2f} "
                f"| {medians['bulk']:.2f} | {medians['p99']:.2f} "
                f"| {statistics.median(h.buffers.claim for _, h in runs):.1f} "
                f"| {statistics.median(h.buffers.complete for _, h in runs):.1f} |"
            )


# -- Pruning --------------------------------------------------------------------------------------


class Held(logging.Handler):
    """Collects the retention's "dropped X (lock held N s)" lines."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def build_prune_day(rows: int) -> None:
    """awa_bench_history_prune: ``rows`` completed jobs finished yesterday, in yesterday's partition."""
    prepare(PRUNE)
    now = datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if now - today < timedelta(minutes=2):
        raise SystemExit("yesterday's partition is not past a 60 s retention yet: run this after 00:02 UTC")
    with connect() as conn:
        empty_all(conn)
    run_async(_drop_partitions)
    run_async(_create_range, today - timedelta(days=1), today, ("awa_job_done_completed",))
    run_async(_ensure)
    started = time.monotonic()
    with connect() as conn:
        end, span = today - timedelta(milliseconds=1), timedelta(days=1) - timedelta(seconds=1)
        insert_done(conn, "completed", 1, rows, end, span)
        conn.execute("VACUUM ANALYZE")
    log(f"  the day built in {time.monotonic() - started:,.0f} s")


@dataclass
class PruneRun:
    rate: float  # the whole drain's, jobs/s
    finished: list[float]  # each completion, seconds after the first claim
    drop_at: float | None = None  # the drop's start, seconds after the first claim
    held: list[str] = field(default_factory=list)  # the retention's log lines
    drop_seconds: float | None = None  # drop_expired's wall time (the bench's own drop)
    probes: list[tuple[float, float]] = field(default_factory=list)  # (run_at after the first claim, lag ms)

    def window_rate(self, start: float, seconds: float) -> float:
        return sum(1 for t in self.finished if start <= t < start + seconds) / seconds

    def lag_near(self, at: float) -> float:
        """The worst promotion lag of the probes due from 1 s before ``at`` to 3 s after it."""
        return max((lag for due, lag in self.probes if at - 1 <= due <= at + 3), default=float("nan"))


def finished(conn: Any, job_id: int) -> bool:
    return bool(conn.execute("SELECT finalized_at IS NOT NULL FROM awa_job_all WHERE id = %s", [job_id]).fetchone()[0])


def enqueue_probes(moments: list[datetime]) -> list[int]:
    from awa_django.models import Job

    return [Job.objects.enqueue("noop", queue=PROBE_QUEUE, run_at=moment).pk for moment in moments]


def drained(conn: Any, n: int, low: int, high: int, probes: list[int], proc: Any) -> PruneRun:
    """The drain's rate, its completions' moments and the probes' lags, once all are done."""
    wait_until(lambda: left(conn) == 0, max(300.0, n / 100), proc, f"the drain of {n} jobs")
    rate, first = span_rate(conn, n, low, high)
    wait_until(lambda: all(finished(conn, p) for p in probes), 60, proc, "the probes' completion")
    offsets = conn.execute(
        "SELECT extract(epoch FROM finalized_at - %s) FROM awa_job_done"
        " WHERE id BETWEEN %s AND %s AND queue = %s ORDER BY 1",
        [first, low, high, QUEUE],
    ).fetchall()
    lags = conn.execute(
        "SELECT extract(epoch FROM run_at - %s), extract(epoch FROM attempted_at - run_at) * 1000"
        " FROM awa_job_all WHERE id = ANY(%s) ORDER BY 1",
        [first, probes],
    ).fetchall()
    return PruneRun(rate, [float(t) for (t,) in offsets], probes=[(float(a), float(b)) for a, b in lags])


def prune_by_bench(n: int, prune: bool) -> PruneRun:
    """Drain n jobs; a third in, probes due from 0.5 to 3 s later, and (``prune``) this process
    runs retention.drop_expired with a retention that yesterday's day is past."""
    from awa_django.worker import retention

    clean(empty=False)
    _, low, high = bulk(n, vacuum=False)  # as the leader's run must (its worker is running)
    worker = start_worker(QUEUE, PROBE_QUEUE)
    handler = Held()
    logging.getLogger("awa_django.worker.retention").addHandler(handler)
    try:
        with connect() as conn:
            wait_until(lambda: left(conn) <= n * 2 // 3, max(300.0, n / 100), worker, "a third of the drain")
            (began,) = conn.execute("SELECT now()").fetchone()
            probes = enqueue_probes([began + timedelta(seconds=0.5 * k) for k in range(1, 7)])
            drop_seconds = None
            if prune:
                started = time.monotonic()
                dropped = run_async(retention.drop_expired, default_config(completed_retention=60.0))
                drop_seconds = time.monotonic() - started
                if not dropped:
                    raise SystemExit("drop_expired dropped nothing: build the day first (prune --day N)")
            run = drained(conn, n, low, high, probes, worker)
            (first,) = conn.execute(
                "SELECT min(attempted_at) FROM awa_job_done WHERE id BETWEEN %s AND %s", [low, high]
            ).fetchone()
    finally:
        logging.getLogger("awa_django.worker.retention").removeHandler(handler)
        stop_worker(worker)
    run.drop_at = (began - first).total_seconds()
    run.held, run.drop_seconds = handler.lines, drop_seconds
    return run


LOG_LINE = re.compile(r"^(\S+ \S+) .*?(now the maintenance leader.*|retention: dropped .*)")  # asctime, message


def wait_for_line(path: Path, text: str, timeout: float, proc: Any) -> tuple[datetime, str]:
    """The first line of the worker's log holding ``text``: its time (the worker's clock) and text."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in path.read_text(errors="replace").splitlines():
            found = LOG_LINE.match(line)
            if found and text in found.group(2):
                return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone(), found.group(2)
        if proc.poll() is not None:
            raise SystemExit(f"the worker exited before logging {text!r}; see {path}")
        time.sleep(0.1)
    raise SystemExit(f"the worker did not log {text!r} within {timeout:.0f} s; see {path}")


def prune_by_leader(n: int, drain_seconds: float) -> PruneRun:
    """The worker's own leader drops yesterday: started with a completed retention that yesterday's
    day passes about 30 s later, its first retention sweep (at once) finds nothing and its next, one
    RETENTION_EVERY later, drops the day. The n jobs are enqueued so that the drop falls a third
    into their drain (``drain_seconds``: the drain's length without pruning); probes are due every
    0.5 s from 3 s before the expected sweep to 6 s after it."""
    from awa_django.worker.maintenance import RETENTION_EVERY

    clean(empty=False)
    with connect() as conn:
        (now,) = conn.execute("SELECT now()").fetchone()
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    keep = (now - today).total_seconds() + 30
    log_path = WORKER_LOG.with_name("awa_bench_history_leader.log")
    log_path.write_bytes(b"")
    worker = start_worker(QUEUE, PROBE_QUEUE, completed_retention=keep, log_path=log_path)
    try:
        with connect() as conn:
            led, _ = wait_for_line(log_path, "now the maintenance leader", 120, worker)
            expected = led + timedelta(seconds=RETENTION_EVERY)
            probes = enqueue_probes([expected + timedelta(seconds=0.5 * k) for k in range(-6, 13)])
            # The bulk enqueue itself takes about a second; the drain starts as it commits.
            start_at = expected - timedelta(seconds=drain_seconds / 3 + 1)
            time.sleep(max(0.0, (start_at - datetime.now(UTC)).total_seconds()))
            _, low, high = bulk(n, vacuum=False)  # the worker drains them already
            run = drained(conn, n, low, high, probes, worker)
            at, line = wait_for_line(log_path, "retention: dropped", 120, worker)
            (first,) = conn.execute(
                "SELECT min(attempted_at) FROM awa_job_done WHERE id BETWEEN %s AND %s", [low, high]
            ).fetchone()
    finally:
        stop_worker(worker)
    held = float(re.search(r"lock held ([0-9.]+) s", line).group(1))  # type: ignore[union-attr]
    run.held = [line]
    run.drop_at = (at - first).total_seconds() - held
    return run


def expired_rows() -> int:
    """The completed jobs finished before today (the day the prune drops)."""
    with connect() as conn:
        (n,) = conn.execute(
            "SELECT count(*) FROM awa_job_done_completed"
            " WHERE finalized_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        ).fetchone()
    return int(n)


def prune(args: argparse.Namespace) -> None:
    logging.getLogger("awa_django.worker.retention").setLevel(logging.INFO)
    rows: list[tuple[str, PruneRun, PruneRun]] = []
    if args.database and (args.pairs != 1 or len(args.by) != 1):
        raise SystemExit("--database has one day to drop: give --pairs 1 and one --by")
    expired = 0
    for pair in range(args.pairs):
        for by in args.by:
            if args.database:
                use(args.database)
            else:
                build_prune_day(args.day)
            if pair == 0 and by == args.by[0]:
                sizes(args.database or PRUNE)
            expired = expired_rows()
            plain = prune_by_bench(args.jobs, prune=False)
            if by == "bench":
                pruned = prune_by_bench(args.jobs, prune=True)
            else:
                pruned = prune_by_leader(args.jobs, drain_seconds=args.jobs / plain.rate)
            rows.append((by, plain, pruned))
            log(
                f"  pair {pair + 1} by {by}: {plain.rate:,.0f} / {pruned.rate:,.0f} jobs/s, drop at "
                f"{pruned.drop_at:.1f} s, {pruned.held}, lags {[round(lag) for _, lag in pruned.probes]}"
            )
    w = args.window
    print(f"\npruning a day of {expired:,} completed jobs during a drain of {args.jobs:,} (alternated pairs):")
    print(
        "| pair | dropped by | retention's log | drop_expired wall s | drain jobs/s without / with | ratio "
        f"| {w:.0f} s from the drop's start, jobs/s without / with | ratio "
        "| promotion lag ms, probes due during the drop: without / with | worst probe lag ms: without / with |"
    )
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, (by, a, b) in enumerate(rows, 1):
        assert b.drop_at is not None
        held = "; ".join(re.sub(r"^retention: ", "", line) for line in b.held if "dropped" in line)
        wall = "" if b.drop_seconds is None else f"{b.drop_seconds:.3f}"
        ra, rb = a.window_rate(b.drop_at, w), b.window_rate(b.drop_at, w)
        worst_a, worst_b = max(lag for _, lag in a.probes), max(lag for _, lag in b.probes)
        print(
            f"| {i} | {'this process' if by == 'bench' else 'the leader'} | {held} | {wall} "
            f"| {a.rate:,.0f} / {b.rate:,.0f} | {b.rate / a.rate:.2f} | {ra:,.0f} / {rb:,.0f} | {rb / ra:.2f} "
            f"| {a.lag_near(b.drop_at):,.0f} / {b.lag_near(b.drop_at):,.0f} | {worst_a:,.0f} / {worst_b:,.0f} |"
        )


def drop_database(name: str) -> None:
    with connect("postgres") as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    log(f"dropped {name}")


def drop(args: argparse.Namespace) -> None:
    with connect("postgres") as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", [PREFIX + "%"])]
    for name in names:
        drop_database(name)


def sizes_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare", help="history against empty, alternated; several sizes make the curve")
    c.add_argument("--history", type=sizes_list, default=[MIX_TOTAL], help="rows, or rows,rows,... (the curve)")
    c.add_argument("--pairs", type=int, default=3)
    c.add_argument("--jobs", type=int, default=50_000)
    c.add_argument("--samples", type=int, default=300)
    c.add_argument("--batch", type=int, default=100, help="jobs per claim and completion in the buffers' EXPLAIN")
    c.add_argument("--rebuild", action="store_true")
    c.add_argument("--database", default=HISTORY, help=f"the history database's name (default {HISTORY})")
    c.add_argument(
        "--today",
        action="store_true",
        help="build the history's finished jobs over today (UTC) so far, in the current partitions, not the last 24 h",
    )
    c.add_argument(
        "--width",
        type=float,
        default=None,
        help="the partitions' width in hours when the history is built (default: the worker's: an hour for a day)",
    )
    p = sub.add_parser("prune", help="drop a day of completed jobs during a drain")
    p.add_argument("--day", type=int, default=5_000_000)
    p.add_argument("--pairs", type=int, default=1)
    p.add_argument("--jobs", type=int, default=50_000)
    p.add_argument("--database", help="an existing database whose yesterday to drop (e.g. awa_bench_history_big)")
    p.add_argument("--window", type=float, default=3.0, help="seconds of the drain from the drop's start")
    p.add_argument(
        "--by",
        type=lambda text: text.split(","),
        default=["bench", "leader"],
        help="who drops: bench (this process, retention.drop_expired), leader (the worker's own retention)",
    )
    sub.add_parser("drop", help="drop every awa_bench_history_* database")
    if sys.argv[1:2] == ["_worker"]:
        worker_main(sys.argv[2:])
        return
    args = parser.parse_args()
    import django

    django.setup()
    if args.command == "compare":
        compare(args)
    elif args.command == "prune":
        prune(args)
    else:
        drop(args)


if __name__ == "__main__":
    main()
