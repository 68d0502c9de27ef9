"""Retention: finished jobs past their keep time leave the database, a partition at a time.

Finished jobs live in ``awa_job_done`` (migration 0023): LIST partitioned by state into a
completed branch and a failed branch (failed and cancelled, kept longer), each RANGE partitioned
by ``finalized_at``. ``prune``, the leader's retention duty, keeps each branch's partitions:

- **ahead**: the range partitions from the current one to ``AHEAD`` widths past now exist, so a
  finishing job lands in its own partition, never in the branch's DEFAULT one;
- **drop**: a partition whose upper bound is older than its branch's retention is dropped whole,
  in a transaction of its own (a DROP takes its branch's ACCESS EXCLUSIVE lock, held for
  milliseconds);
- **never a queue behind a DDL**: a create or a drop takes its ACCESS EXCLUSIVE locks first, with
  ``NOWAIT`` (``_exclusive``), and when one is held elsewhere (a long console query, the leader's
  own rollup round, a batch of completions) it tries again a little later, up to ``LOCK_TRIES``
  times, then gives up until the next sweep. A lock request that waited (``lock_timeout``, as until
  2026-12-05) would sit at the head of the branch's lock queue, and every completion's INSERT
  would queue behind it for as long as it waited: a soak at 5,000 jobs/s read a pickup p99 of 36 ms
  in a minute where three such waits of 200 ms ran out (bench/README.md, "Soak");
- **sweep**: what partitions cannot hold is deleted in bounded batches, by index: the finished
  rows still in the hot table (unique jobs keeping their key past their end, jobs finished before
  migration 0023) and the DEFAULT partitions.
- **steps**: durable jobs' step records and events (``awa_job_step``, ``awa_job_event``) whose job
  is gone (its partition dropped, its row deleted) are deleted by ``sweep_steps``: a walk of those
  tables by job id from a cursor kept between sweeps, at most ``STEP_BATCHES`` x ``STEP_BATCH``
  job ids per sweep, each probed in ``awa_job`` and ``awa_job_done`` by primary key and id index
  (never a scan of a history partition). A job's steps thus leave at most a full walk after it.

A partition's width follows its branch's retention (``width_for``): the widest of ``WIDTHS`` not
longer than a ``SLICES``-th of it (an hour for the completed jobs' day, six hours for the failed
jobs' week, a minute for a retention of minutes), or the next wider one where that would make more
than ``MAX_SLICES`` (ten minutes for an hour's retention). So a job is kept at most its retention
plus one width, and a branch has at most ``MAX_SLICES`` + ``AHEAD`` partitions for a retention up
to 48 days (26 and 30 with the default retentions). Narrow, so that the partition every completion
writes stays small: its args index (GIN, one random leaf page per key) merges its pending list
into a few thousand pages kept in memory, not a day's 31,000 (on a 6.5 M-row day a 32-row
completion took 1.58 s, and merging 108 pending pages alone 343 ms: bench/README.md, "History in
hour partitions"), and its vacuums and analyzes are an hour's. The pure part (names, widths, what
to create and what to drop) is separate from the statements that do it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from awa_django.sql import statements
from awa_django.states import JobState
from awa_django.worker.config import WorkerConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = [
    "AHEAD",
    "BATCH",
    "BRANCHES",
    "MAX_SLICES",
    "SLICES",
    "WIDTHS",
    "Partition",
    "ensure_partitions",
    "plan_creates",
    "plan_drops",
    "prune",
    "retention",
    "sweep_steps",
    "width_for",
]

BATCH = 1000
# Partition widths, widest first: a branch's width is the widest not longer than a SLICES-th of
# its retention (the narrowest when none is).
WIDTHS = (
    timedelta(days=1),
    timedelta(hours=6),
    timedelta(hours=1),
    timedelta(minutes=10),
    timedelta(minutes=1),
)
SLICES = 24
MAX_SLICES = 48  # ... unless that makes more partitions than this: then the next wider width
AHEAD = 2  # range partitions exist this many widths past now
# A create or a drop tries for its ACCESS EXCLUSIVE locks this many times (NOWAIT: never queued),
# a jittered pause of up to LOCK_PAUSE seconds apart, then gives up until the next sweep.
LOCK_TRIES = 20
LOCK_PAUSE = 0.05
# Any other lock its statements need (a workflow edge's row) is waited for at most this long.
LOCK_TIMEOUT = "200ms"
# The rows a new partition takes over from its branch's DEFAULT partition at most; with more, the
# range is left to the default (swept by batches) and the next range is created instead.
MOVE_FROM_DEFAULT_MAX = 100_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STEP_BATCH = 1000  # job ids a step-record sweep statement looks at
STEP_BATCHES = 10  # such statements per sweep at most


@dataclass(frozen=True)
class Branch:
    """One LIST partition of awa_job_done, RANGE partitioned by finalized_at."""

    table: str
    prefix: str  # its range partitions' names: prefix + the lower bound, UTC
    states: tuple[JobState, ...]


BRANCHES = (
    Branch("awa_job_done_completed", "awa_job_done_c_", (JobState.COMPLETED,)),
    Branch("awa_job_done_failed", "awa_job_done_f_", (JobState.FAILED, JobState.CANCELLED)),
)


@dataclass(frozen=True)
class Partition:
    branch: str
    name: str
    lower: datetime
    upper: datetime


def retention(config: WorkerConfig) -> dict[JobState, timedelta]:
    """How long finished jobs are kept, per final state."""
    return {
        JobState.COMPLETED: timedelta(seconds=config.completed_retention),
        JobState.FAILED: timedelta(seconds=config.failed_retention),
        JobState.CANCELLED: timedelta(seconds=config.failed_retention),
    }


def branch_retention(branch: Branch, config: WorkerConfig) -> timedelta:
    """The longest retention among the branch's states (they share partitions)."""
    keep = retention(config)
    return max(keep[state] for state in branch.states)


def width_for(keep: timedelta) -> timedelta:
    """The partition width for a retention: the widest of WIDTHS not longer than ``keep / SLICES``,
    or the next wider one when that would cut the retention into more than MAX_SLICES (a retention of
    an hour: ten minutes, not 60 partitions of a minute); the narrowest for a retention too short."""
    for i, width in enumerate(WIDTHS):
        if width * SLICES <= keep:
            return WIDTHS[i - 1] if i > 0 and width * MAX_SLICES < keep else width
    return WIDTHS[-1]


def floor_to(moment: datetime, width: timedelta) -> datetime:
    """``moment`` rounded down to a multiple of ``width`` since the epoch (UTC)."""
    return EPOCH + ((moment - EPOCH) // width) * width


def partition_name(branch: Branch, lower: datetime) -> str:
    return f"{branch.prefix}{lower.astimezone(UTC):%Y%m%d_%H%M}"


def plan_creates(existing: Sequence[Partition], now: datetime, width: timedelta) -> list[tuple[datetime, datetime]]:
    """The ranges to create so that partitions cover [the current width's start, now + AHEAD
    widths), after the existing ones: each ends on a multiple of ``width``, so a width changed with
    the retention realigns at the first new range. Never a range overlapping an existing one."""
    start = floor_to(now, width)
    if existing:
        start = max(start, max(p.upper for p in existing))
    ranges: list[tuple[datetime, datetime]] = []
    while start < now + AHEAD * width:
        end = floor_to(start, width) + width
        ranges.append((start, end))
        start = end
    return ranges


def plan_drops(existing: Iterable[Partition], now: datetime, keep: timedelta) -> list[Partition]:
    """The partitions every row of which is past the retention (upper bound <= now - keep)."""
    return [p for p in existing if p.upper <= now - keep]


async def list_partitions(conn: psycopg.AsyncConnection[Any]) -> dict[str, list[Partition]]:
    """Each branch's range partitions, oldest first."""
    found: dict[str, list[Partition]] = {branch.table: [] for branch in BRANCHES}
    cursor = await conn.execute(statements["list_job_partitions"])
    for table, name, lower, upper in await cursor.fetchall():
        found[table].append(Partition(table, name, lower.astimezone(UTC), upper.astimezone(UTC)))
    return found


async def _database_now(conn: psycopg.AsyncConnection[Any]) -> datetime:
    """The database's now(), in UTC. psycopg gives timestamps in the session's time zone, and
    Python's arithmetic between two datetimes of one zone is wall-clock arithmetic: across a DST
    change, `now - keep` would be an hour off, and partitions dropped an hour early."""
    cursor = await conn.execute("SELECT now()")
    row = await cursor.fetchone()
    assert row is not None
    moment: datetime = row[0]
    return moment.astimezone(UTC)


async def _create(conn: psycopg.AsyncConnection[Any], branch: Branch, lower: datetime, upper: datetime) -> bool | None:
    """Create and attach one range partition, taking over its range's rows from the DEFAULT
    partition (few: they finished before the range existed). False when the default holds too
    many rows of the range to move (the range stays in it, for good); None when this sweep could
    not create it (its locks were busy, or another leader made it or an overlapping one
    meanwhile), so that the sweep goes no further in this branch and the next one starts here."""
    name = partition_name(branch, lower)
    table = sql.Identifier(branch.table)
    default = sql.Identifier(f"{branch.table}_default")
    partition = sql.Identifier(name)

    # The branch first, then its default, ACCESS EXCLUSIVE (for milliseconds; see _exclusive):
    # - an insert routed to the default partition before the range existed, that then waited for
    #   the default's lock, would fail the partition constraint once the range is attached: with
    #   the branch locked, inserts wait before their routing;
    # - a reader plans with the partitions it sees (ATTACH alone lets readers go on), then takes
    #   its snapshot: planned before this commits and reading after, it would scan the default
    #   without the rows moved out of it, and not the new partition holding them, nor the jobs
    #   finished into it since (a fresh-clone CI run saw a completed job not found by id). With
    #   the branch locked, readers plan after the commit.
    async def create() -> bool:
        cursor = await conn.execute(
            sql.SQL(
                "SELECT count(*) FROM (SELECT 1 FROM {} WHERE finalized_at >= %s AND finalized_at < %s LIMIT %s) r"
            ).format(default),
            (lower, upper, MOVE_FROM_DEFAULT_MAX + 1),
        )
        row = await cursor.fetchone()
        if row is not None and row[0] > MOVE_FROM_DEFAULT_MAX:
            logger.warning(
                "retention: %s already holds over %d jobs finished in [%s, %s); that range stays in it",
                f"{branch.table}_default",
                MOVE_FROM_DEFAULT_MAX,
                lower.isoformat(),
                upper.isoformat(),
            )
            return False
        await conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(partition, table)
        )
        await conn.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {} WHERE finalized_at >= %s AND finalized_at < %s RETURNING *) "
                "INSERT INTO {} SELECT * FROM moved"
            ).format(default, partition),
            (lower, upper),
        )
        await conn.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
                table, partition, sql.Literal(lower), sql.Literal(upper)
            )
        )
        return True

    try:
        created = await _exclusive(conn, (table, default), create)
    except psycopg.errors.LockNotAvailable:
        logger.info("retention: %s not created this sweep: its locks were busy", name)
        return None
    except (psycopg.errors.DuplicateTable, psycopg.errors.InvalidObjectDefinition) as exc:
        # Two leaders overlapping (an old one finishing its sweep), perhaps with other widths
        # (a rolling deploy that changed a retention): the other one's partition stands.
        logger.info("retention: %s not created this sweep: %s", name, exc)
        return None
    return created


class _Busy(Exception):  # noqa: N818 (a signal between _exclusive's tries, never shown)
    """A NOWAIT lock request of ``_exclusive`` was refused (``refused``): someone holds one of its tables."""

    def __init__(self, refused: psycopg.errors.LockNotAvailable) -> None:
        super().__init__(str(refused))
        self.refused = refused


async def _exclusive(
    conn: psycopg.AsyncConnection[Any], tables: Sequence[sql.Identifier], body: Callable[[], Awaitable[T]]
) -> T:
    """``body()`` in a transaction that first takes ACCESS EXCLUSIVE on ``tables`` alone (``ONLY``:
    not their partitions), in that order, each with NOWAIT. When one is held elsewhere the
    transaction ends and the whole is tried again after a jittered pause, ``LOCK_TRIES`` times,
    then LockNotAvailable propagates. A lock that a statement of ``body`` waits for in vain (the
    transaction's ``lock_timeout``) propagates at once: only the NOWAIT requests are retried, since
    a retry would hold the branch again while that statement waited.

    NOWAIT, not a lock_timeout: a request that waits goes to the head of the table's lock queue,
    and every later request that conflicts with it queues behind it, even one that does not
    conflict with the holder. For a branch of awa_job_done that is every completion's INSERT
    (ROW EXCLUSIVE): they would all wait for as long as the DDL waited. A NOWAIT request is
    granted at once or refused at once, so nobody ever waits for one that is not granted.
    ``ONLY``: inserts and readers lock the branch before its partitions, so the branch alone
    orders them after the DDL; locking its partitions too would be refused whenever any of them
    is busy (an autovacuum of the current one, which a NOWAIT request does not make yield)."""
    locks = sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE NOWAIT").format(
        sql.SQL(", ").join(sql.SQL("ONLY {}").format(table) for table in tables)
    )
    for attempt in range(1, LOCK_TRIES + 1):
        try:
            async with conn.transaction():
                await conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))
                try:
                    await conn.execute(locks)
                except psycopg.errors.LockNotAvailable as refused:
                    raise _Busy(refused) from refused
                return await body()
        except _Busy as busy:
            if attempt == LOCK_TRIES:
                raise busy.refused from None
        await asyncio.sleep(_pause())
    raise AssertionError("unreachable")  # the last try returned or raised


def _pause() -> float:
    """Seconds between two tries for a DDL's locks: jittered, so two leaders' tries (an old one
    finishing its sweep, a new one starting) do not keep meeting."""
    return random.uniform(0.2, 1.0) * LOCK_PAUSE


async def ensure_partitions(conn: psycopg.AsyncConnection[Any], config: WorkerConfig) -> list[str]:
    """Create the range partitions due now and AHEAD widths ahead; return their names."""
    now = await _database_now(conn)
    existing = await list_partitions(conn)
    created: list[str] = []
    for branch in BRANCHES:
        width = width_for(branch_retention(branch, config))
        for lower, upper in plan_creates(existing[branch.table], now, width):
            done = await _create(conn, branch, lower, upper)
            if done is None:
                # Not this range this sweep: no later one either. plan_creates starts after the
                # newest partition, so a later range made now would leave this one to the DEFAULT
                # partition for good.
                break
            if done:
                created.append(partition_name(branch, lower))
    return created


async def _drop(conn: psycopg.AsyncConnection[Any], partition: Partition) -> float | None:
    """Drop one partition with its workflow steps' in-edges (and the workflows left empty);
    return the seconds the DROP's transaction took (its lock's hold), None when the lock was busy."""
    table = sql.Identifier(partition.name)
    try:
        cursor = await conn.execute(
            sql.SQL("SELECT DISTINCT workflow_id FROM {} WHERE workflow_id IS NOT NULL").format(table)
        )
    except psycopg.errors.UndefinedTable:
        logger.info("retention: %s already dropped (another leader's sweep)", partition.name)
        return None
    workflows = [row[0] for row in await cursor.fetchall()]

    async def drop() -> float:
        started = time.monotonic()  # the locks are held from here (the try that got them)
        if workflows:
            await conn.execute(
                sql.SQL(
                    "DELETE FROM awa_job_edge AS e USING {} AS j "
                    "WHERE j.workflow_id IS NOT NULL AND e.downstream_id = j.id"
                ).format(table)
            )
        await conn.execute(sql.SQL("DROP TABLE {}").format(table))
        return time.monotonic() - started

    try:
        # DROP TABLE of a range partition takes ACCESS EXCLUSIVE on its branch, on itself and on
        # the branch's DEFAULT partition (whose implicit bounds change).
        default = sql.Identifier(f"{partition.branch}_default")
        held = await _exclusive(conn, (sql.Identifier(partition.branch), default, table), drop)
    except psycopg.errors.LockNotAvailable:
        logger.info("retention: %s not dropped this sweep: its branch's lock was busy", partition.name)
        return None
    except psycopg.errors.UndefinedTable:
        logger.info("retention: %s already dropped (another leader's sweep)", partition.name)
        return None
    if workflows:
        await conn.execute(statements["delete_empty_workflows"], {"ids": workflows})
    return held


async def drop_expired(conn: psycopg.AsyncConnection[Any], config: WorkerConfig) -> list[str]:
    """Drop every partition past its branch's retention; return their names."""
    now = await _database_now(conn)
    existing = await list_partitions(conn)
    dropped: list[str] = []
    for branch in BRANCHES:
        for partition in plan_drops(existing[branch.table], now, branch_retention(branch, config)):
            held = await _drop(conn, partition)
            if held is not None:
                logger.info("retention: dropped %s (lock held %.3f s)", partition.name, held)
                dropped.append(partition.name)
    return dropped


async def sweep(conn: psycopg.AsyncConnection[Any], config: WorkerConfig) -> int:
    """Delete, in bounded batches, the finished jobs past retention that no partition drop takes:
    those still in the hot table and those in the DEFAULT partitions. Return how many went."""
    keep = retention(config)
    deleted = 0
    for state, older_than in keep.items():
        while True:
            cursor = await conn.execute(
                statements["delete_finished_jobs"],
                {"state": state.value, "older_than": older_than, "limit": BATCH},
            )
            deleted += cursor.rowcount
            if cursor.rowcount < BATCH:
                break
            await asyncio.sleep(0)
    while True:
        cursor = await conn.execute(
            statements["delete_default_finished_jobs"],
            {
                "completed_older_than": keep[JobState.COMPLETED],
                "failed_older_than": max(keep[JobState.FAILED], keep[JobState.CANCELLED]),
                "limit": BATCH,
            },
        )
        deleted += cursor.rowcount
        if cursor.rowcount < BATCH:
            break
        await asyncio.sleep(0)
    return deleted


@dataclass
class StepCursor:
    """Where the walk of durable jobs' records (``sweep_steps``) goes on from: the last job id it
    looked at (0: the start)."""

    after: int = 0


_STEP_CURSOR = StepCursor()  # the leader's, kept between its sweeps


async def sweep_steps(
    conn: psycopg.AsyncConnection[Any], cursor: StepCursor, batches: int = STEP_BATCHES, batch: int = STEP_BATCH
) -> int:
    """Delete the step records and events of jobs that exist no more, walking on from ``cursor``
    (at most ``batches`` statements of ``batch`` job ids; back to the start at the end). Returns
    the rows deleted."""
    deleted = 0
    for _ in range(batches):
        result = await conn.execute(statements["delete_orphan_steps"], {"after": cursor.after, "limit": batch})
        row = await result.fetchone()
        assert row is not None
        last, looked, steps, events = row
        deleted += steps + events
        if looked < batch:
            cursor.after = 0
            break
        cursor.after = last
        await asyncio.sleep(0)
    return deleted


async def prune(conn: psycopg.AsyncConnection[Any], config: WorkerConfig, *, turn: asyncio.Lock | None = None) -> int:
    """One retention sweep: partitions ahead, expired partitions dropped, leftovers swept, then the
    records of durable jobs that are gone. Returns the rows the sweep deleted (a dropped
    partition's rows are not counted: they are not read). ``turn``: held while creating and
    dropping (the leader's rollup rounds take it too, so its own reads never hold a branch the
    DDL tries for)."""
    async with turn if turn is not None else contextlib.nullcontext():
        await ensure_partitions(conn, config)
        await drop_expired(conn, config)
    deleted = await sweep(conn, config)
    return deleted + await sweep_steps(conn, _STEP_CURSOR)
