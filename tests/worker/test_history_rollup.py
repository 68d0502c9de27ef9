"""The history rollup (``awa_django.worker.history``): the numbers it writes are the ones the jobs'
rows give, a round replaces its minutes (twice, or from two leaders, counts once), the watermark
survives missed rounds and a change of leader, the table stays bounded, and a catch-up reads each
finished job once, through the finish-time indexes of the hot table and of awa_job_done."""

from __future__ import annotations

import asyncio
import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection
from hypothesis import example, given
from hypothesis import strategies as st

from awa_django import defaults
from awa_django.models import HistoryMark, HistoryMinute, Job, JobState
from awa_django.sql import statements
from awa_django.worker.history import RollupBounds, roll_up_history, rollup_bounds
from tests.conftest import connect_outside_django, connection_params
from tests.factories import JobFactory
from tests.harness import make_config, running_worker, wait_until

NOW = datetime(2026, 3, 4, 12, 30, 40, tzinfo=UTC)  # the database clock the rounds are given
MINUTE = timedelta(minutes=1)


def percentile(values: Sequence[float], p: float) -> float | None:
    """Postgres's percentile_cont: linear interpolation between the closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    pos = p * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def finished(
    kind: str, queue: str, state: str, finalized_at: datetime, wait: float | None = 1.0, run: float = 2.0
) -> Job:
    """A finished job; ``wait`` None: never attempted (cancelled before it ran)."""
    if wait is None:
        return JobFactory(kind=kind, queue=queue, state=state, finalized_at=finalized_at, run_at=finalized_at)
    attempted_at = finalized_at - timedelta(seconds=run)
    job: Job = JobFactory(
        kind=kind,
        queue=queue,
        state=state,
        attempt=1,
        run_at=attempted_at - timedelta(seconds=wait),
        attempted_at=attempted_at,
        finalized_at=finalized_at,
    )
    return job


def expected_rows(jobs: Sequence[Job], top: int = defaults.HISTORY_TOP) -> dict[tuple[Any, ...], dict[str, Any]]:
    """What awa_history must hold for ``jobs``, computed from the rows in Python."""
    groups: dict[tuple[datetime, str, str], list[Job]] = defaultdict(list)
    for job in jobs:
        assert job.finalized_at is not None
        minute = job.finalized_at.replace(second=0, microsecond=0)
        groups[(minute, "kind", job.kind)].append(job)
        groups[(minute, "queue", job.queue)].append(job)
    buckets: dict[tuple[datetime, str, str], list[Job]] = defaultdict(list)
    for minute, dimension in {(m, d) for m, d, _ in groups}:
        names = sorted(
            (n for m, d, n in groups if (m, d) == (minute, dimension)),
            key=lambda n: (-len(groups[(minute, dimension, n)]), n),
        )
        for rank, name in enumerate(names, start=1):
            buckets[(minute, dimension, name if rank <= top else "")] += groups[(minute, dimension, name)]
    out = {}
    for key, members in buckets.items():
        waits = [(j.attempted_at - j.run_at).total_seconds() for j in members if j.attempted_at]
        runs = [(j.finalized_at - j.attempted_at).total_seconds() for j in members if j.attempted_at and j.finalized_at]
        out[key] = {
            "completed": sum(j.state == JobState.COMPLETED for j in members),
            "failed": sum(j.state == JobState.FAILED for j in members),
            "cancelled": sum(j.state == JobState.CANCELLED for j in members),
            "wait_p50": percentile(waits, 0.5),
            "wait_p95": percentile(waits, 0.95),
            "run_p50": percentile(runs, 0.5),
            "run_p95": percentile(runs, 0.95),
        }
    return out


def stored_rows() -> dict[tuple[Any, ...], dict[str, Any]]:
    fields = ("completed", "failed", "cancelled", "wait_p50", "wait_p95", "run_p50", "run_p95")
    return {
        (row.minute, row.dimension, row.name): {f: getattr(row, f) for f in fields}
        for row in HistoryMinute.objects.all()
    }


def assert_same(stored: dict[tuple[Any, ...], dict[str, Any]], expected: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    assert set(stored) == set(expected)
    for key, want in expected.items():
        got = stored[key]
        for field, value in want.items():
            if value is None or isinstance(value, int):
                assert got[field] == value, (key, field)
            else:
                assert got[field] == pytest.approx(value, abs=1e-6), (key, field)


def one_round(now: datetime = NOW, top: int = defaults.HISTORY_TOP) -> RollupBounds:
    async def one() -> RollupBounds:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            return await roll_up_history(conn, now, top=top)

    return asyncio.run(one())


def run_round(now: datetime = NOW, top: int = defaults.HISTORY_TOP) -> list[RollupBounds]:
    """Rounds until the rollup reached the current minute (the first one starts at the window's
    start, a day back, and a round reads at most HISTORY_CATCH_UP_MINUTES)."""
    rounds = [one_round(now, top)]
    while rounds[-1].catching_up:
        rounds.append(one_round(now, top))
        assert len(rounds) <= defaults.HISTORY_WINDOW_MINUTES // defaults.HISTORY_CATCH_UP_MINUTES + 1
    return rounds


def mixed_jobs() -> list[Job]:
    jobs = []
    for i in range(7):
        at = NOW - timedelta(minutes=3, seconds=i * 5)
        jobs.append(finished("mail.send", "emails", "completed", at, wait=0.5 + i, run=0.1 * (i + 1)))
    jobs.append(finished("mail.send", "emails", "failed", NOW - timedelta(minutes=3, seconds=2), wait=9.0, run=4.0))
    jobs.append(finished("report.build", "emails", "completed", NOW - timedelta(minutes=2), wait=0.0, run=30.0))
    jobs.append(finished("report.build", "reports", "cancelled", NOW - timedelta(minutes=2), wait=None))
    jobs.append(finished("report.build", "reports", "failed", NOW - timedelta(seconds=5), wait=2.0, run=1.0))
    return jobs


@pytest.mark.django_db(transaction=True)
def test_rollup__numbers_match_the_jobs_rows_per_kind_and_queue() -> None:
    jobs = mixed_jobs()
    JobFactory(kind="mail.send", queue="emails", state="running", attempt=1, attempted_at=NOW)  # not finished
    JobFactory(kind="mail.send", queue="emails", state="retryable", attempt=1)  # a failed attempt, not the job

    run_round()

    assert_same(stored_rows(), expected_rows(jobs))
    emails = HistoryMinute.objects.get(minute=NOW.replace(second=0, microsecond=0) - 3 * MINUTE, name="emails")
    assert (emails.completed, emails.failed) == (7, 1)


@pytest.mark.django_db(transaction=True)
def test_rollup__twice_or_from_two_leaders_at_once__counts_each_job_once() -> None:
    jobs = mixed_jobs()
    expected = expected_rows(jobs)

    run_round()
    run_round()
    assert_same(stored_rows(), expected)

    async def two_leaders() -> None:
        async with (
            await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as a,
            await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as b,
        ):
            await asyncio.gather(roll_up_history(a, NOW), roll_up_history(b, NOW + timedelta(seconds=1)))

    asyncio.run(two_leaders())
    assert_same(stored_rows(), expected)


@pytest.mark.django_db(transaction=True)
def test_rollup__second_leader_waits_for_the_first_round_and_reads_its_watermark() -> None:
    mixed_jobs()
    first = connect_outside_django()
    try:
        with first.transaction():
            first.execute(statements["lock_history_mark"], {"now": NOW})

            async def blocked() -> RollupBounds:
                async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
                    await conn.execute("SET lock_timeout = '200ms'")
                    return await roll_up_history(conn, NOW)

            with pytest.raises(psycopg.errors.LockNotAvailable):
                asyncio.run(blocked())
    finally:
        first.close()


@pytest.mark.django_db(transaction=True)
def test_rollup__missed_rounds_and_a_new_leader__catch_up_from_the_stored_watermark() -> None:
    early = [finished("a", "q", "completed", NOW - timedelta(minutes=m)) for m in (1, 2)]
    run_round()
    mark = HistoryMark.objects.get()
    assert mark.closed_through == NOW.replace(second=0, microsecond=0)  # 12:30 is still open

    # The leader goes away for three hours; jobs keep finishing in between.
    later_now = NOW + timedelta(hours=3)
    gap = [finished("a", "q", "failed", NOW + timedelta(minutes=m, seconds=7)) for m in (0, 45, 100, 170)]
    rounds = run_round(later_now)  # a new leader: only the database's watermark guides it
    assert len(rounds) == 4  # three hours and a minute, an hour a round
    assert all(b.stop - b.start <= defaults.HISTORY_CATCH_UP_MINUTES * MINUTE for b in rounds)
    assert_same(stored_rows(), expected_rows(early + gap))


@pytest.mark.django_db(transaction=True)
def test_rollup__a_minute_once_final_is_not_recomputed_an_open_one_is() -> None:
    run_round()
    open_minute = NOW.replace(second=0, microsecond=0)
    late_in_final = finished("a", "q", "completed", open_minute - MINUTE + timedelta(seconds=1))
    in_open = finished("a", "q", "completed", open_minute + timedelta(seconds=1))
    run_round(NOW + timedelta(seconds=5))
    # The final minute stays as it was written (no transaction was open when it closed: a job
    # written into it afterwards, as the factory does here, is not read again); the open minute
    # is recomputed.
    assert Job.objects.filter(pk=late_in_final.pk).exists()
    assert_same(stored_rows(), expected_rows([in_open]))


@pytest.mark.django_db(transaction=True)
def test_rollup__kinds_past_the_top_share_one_bucket_and_minutes_past_the_window_go() -> None:
    at = NOW - 2 * MINUTE
    jobs = [finished(f"kind-{k}", "q", "completed", at) for k in range(6) for _ in range(k + 1)]
    old = HistoryMinute.objects.create(minute=NOW - timedelta(days=2), dimension="kind", name="gone", completed=1)

    run_round(top=3)

    kinds = {row.name: row.completed for row in HistoryMinute.objects.filter(dimension="kind")}
    assert kinds == {"kind-5": 6, "kind-4": 5, "kind-3": 4, "": 3 + 2 + 1}
    assert_same(stored_rows(), expected_rows(jobs, top=3))
    assert not HistoryMinute.objects.filter(pk=old.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_rollup__reads_the_hot_table_and_every_finished_partition_through_their_finish_time_index() -> None:
    start, stop = NOW - timedelta(minutes=5), NOW
    conn = connect_outside_django()
    try:
        with conn.transaction():
            conn.execute(statements["pin_history_reads"])  # as a round does
            query = "EXPLAIN " + statements["roll_up_history"]
            plan = "\n".join(r[0] for r in conn.execute(query, {"start": start, "stop": stop, "top": 50}))
    finally:
        conn.close()
    assert "awa_job_finalized_idx" in plan  # the hot table's finished leftovers
    for branch in ("completed", "failed"):
        assert f"using awa_job_done_{branch}_default_finalized_at_id_idx" in plan, plan
    assert "Seq Scan" not in plan, plan


@pytest.mark.django_db(transaction=True)
def test_rollup__the_maintenance_leader_writes_the_history() -> None:
    job = Job.objects.enqueue("noop", queue="hist")
    with running_worker(make_config(["hist"])):
        wait_until(lambda: Job.objects.filter(pk=job.pk, state="completed").exists(), what="the job completed")
        # The next round (at most HISTORY_EVERY later) recomputes the open minute it finished in.
        wait_until(
            lambda: HistoryMinute.objects.filter(dimension="queue", name="hist", completed=1).exists(),
            what="the leader rolled the completed job up",
            timeout=defaults.HISTORY_EVERY * 3,
        )


minutes = st.integers(min_value=0, max_value=3 * 24 * 60)


@given(mark=st.none() | minutes, now=minutes, seconds=st.integers(0, 59))
def test_rollup_bounds__inside_the_window_never_backwards_final_minutes_only(
    mark: int | None, now: int, seconds: int
) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    clock = base + timedelta(minutes=now, seconds=seconds)
    closed = None if mark is None else base + timedelta(minutes=mark)
    bounds = rollup_bounds(closed, clock)
    current = clock.replace(second=0, microsecond=0)
    assert bounds.expired == current - (defaults.HISTORY_WINDOW_MINUTES - 1) * MINUTE
    final_before = (clock - timedelta(seconds=defaults.HISTORY_GRACE)).replace(second=0)
    assert bounds.expired <= bounds.start <= current
    assert bounds.start < bounds.stop <= current + MINUTE
    assert bounds.catching_up == (bounds.stop <= current)
    assert bounds.stop - bounds.start <= defaults.HISTORY_CATCH_UP_MINUTES * MINUTE
    assert bounds.start <= bounds.closed_through <= bounds.stop
    assert bounds.closed_through <= max(final_before, bounds.start)  # only minutes past the grace are final
    if closed is not None and closed >= bounds.expired:
        assert bounds.closed_through >= min(closed, current)  # the watermark never moves back


@given(mark=st.none() | minutes, now=minutes, seconds=st.integers(0, 59), open_for=st.integers(0, 3 * 3600))
# Just past the bound (CI found it): the transaction was clamped to now - open_max, holding the
# watermark a minute back, not passed over. And at the bound, still held.
@example(mark=0, now=2, seconds=0, open_for=int(defaults.HISTORY_OPEN_TRANSACTION_MAX) + 1)
@example(mark=0, now=12, seconds=0, open_for=int(defaults.HISTORY_OPEN_TRANSACTION_MAX))
def test_rollup_bounds__an_open_transaction_holds_its_start_minute_open_up_to_the_bound(
    mark: int | None, now: int, seconds: int, open_for: int
) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    clock = base + timedelta(minutes=now, seconds=seconds)
    closed = None if mark is None else base + timedelta(minutes=mark)
    since = clock - timedelta(seconds=open_for)
    bounds = rollup_bounds(closed, clock, open_since=since)
    plain = rollup_bounds(closed, clock)
    assert (bounds.start, bounds.stop, bounds.expired, bounds.catching_up) == (
        plain.start,
        plain.stop,
        plain.expired,
        plain.catching_up,
    )
    assert bounds.closed_through <= plain.closed_through
    if open_for <= defaults.HISTORY_OPEN_TRANSACTION_MAX:
        # Its jobs are stamped `since`: that minute is not final (unless it already was).
        assert bounds.closed_through <= max(since, bounds.start)
    else:  # passed over: the watermark moves on as if it were not open
        assert bounds.closed_through == plain.closed_through
    # However old, it never holds the watermark further back than the bound.
    floor = (clock - timedelta(seconds=defaults.HISTORY_OPEN_TRANSACTION_MAX)).replace(second=0, microsecond=0)
    assert bounds.closed_through >= min(plain.closed_through, max(floor, bounds.start))


transactions = st.lists(
    # (start, open for) in seconds: a finalising transaction stamps its jobs with its start and
    # commits them when it ends; some run longer than the bound.
    st.tuples(st.integers(0, 45 * 60), st.integers(0, 40 * 60)),
    max_size=8,
)


@given(txs=transactions, step=st.integers(5, 200))
def test_rollup_bounds__every_finished_job_counted_exactly_once_whatever_its_transactions_length(
    txs: list[tuple[int, int]], step: int
) -> None:
    """A model of the rounds over time, through the real rollup_bounds: each round replaces its
    minutes by the jobs committed before it, and sees the transactions open at that moment (the
    oldest within HISTORY_OPEN_TRANSACTION_MAX: read_open_transactions). Once every transaction
    ended, each minute counts every job stamped in it by a transaction open for at most the
    bound, and a job of a longer one at most once; the watermark never lags the clock by more
    than the bound."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    bound = defaults.HISTORY_OPEN_TRANSACTION_MAX
    jobs = [(base + timedelta(seconds=s), base + timedelta(seconds=s + d), d <= bound) for s, d in txs]
    history: dict[datetime, int] = {}
    closed: datetime | None = base
    clock = base
    last_commit = max((commit for _, commit, _ in jobs), default=base)
    while True:
        open_starts = [s for s, commit, _ in jobs if s <= clock < commit]
        holding = [s for s in open_starts if s >= clock - timedelta(seconds=bound)]
        bounds = rollup_bounds(closed, clock, open_since=min(holding, default=None))
        minute = bounds.start
        while minute < bounds.stop:
            history[minute] = sum(
                1 for s, commit, _ in jobs if commit <= clock and s.replace(second=0, microsecond=0) == minute
            )
            minute += MINUTE
        closed = bounds.closed_through
        if not bounds.catching_up:
            floor = (clock - timedelta(seconds=bound)).replace(second=0, microsecond=0)
            assert closed >= max(floor, base), "an old transaction held the history back past the bound"
        if clock > last_commit + 2 * MINUTE and not bounds.catching_up:
            break
        clock += timedelta(seconds=step)
    per_minute: dict[datetime, tuple[int, int]] = defaultdict(lambda: (0, 0))
    for s, _, short in jobs:
        exact, at_most = per_minute[s.replace(second=0, microsecond=0)]
        per_minute[s.replace(second=0, microsecond=0)] = (exact + short, at_most + (not short))
    for minute, (exact, at_most) in per_minute.items():
        assert exact <= history.get(minute, 0) <= exact + at_most, (minute, history.get(minute, 0), exact, at_most)
    assert all(minute in per_minute for minute, n in history.items() if n)


@given(mark=st.none() | minutes, now=minutes, step=st.integers(1, 200))
def test_rollup_bounds__successive_rounds_cover_every_minute_of_the_window(
    mark: int | None, now: int, step: int
) -> None:
    """Rounds run every ``step`` seconds from ``now``: every minute that became final is inside
    some round's range at or after the moment it became final."""
    base = datetime(2026, 1, 1, tzinfo=UTC)
    clock = base + timedelta(minutes=now)
    closed = None if mark is None else base + timedelta(minutes=mark)
    covered: set[datetime] = set()
    first_start = rollup_bounds(closed, clock).start
    for _ in range(80):
        bounds = rollup_bounds(closed, clock)
        minute = bounds.start
        while minute < bounds.stop:
            covered.add(minute)
            minute += MINUTE
        assert closed is None or bounds.closed_through >= min(closed, bounds.start)
        closed = bounds.closed_through
        clock += timedelta(seconds=step)
    # Every minute before the watermark and inside the window was written by some round.
    assert closed is not None
    minute = max(bounds.expired, first_start)
    while minute < closed:
        assert minute in covered
        minute += MINUTE


def job_rows_read() -> int:
    """Rows read so far from the tables that hold jobs (the hot table and every partition of the
    finished ones): by sequential scans, and fetched from the heap by index and bitmap scans."""
    with connect_outside_django() as conn:
        row = conn.execute(
            "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) FROM pg_stat_user_tables "
            "WHERE relname = 'awa_job' OR relname LIKE 'awa\\_job\\_done%%'"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.django_db(transaction=True)
def test_rollup__a_new_leaders_catch_up__reads_each_finished_job_once() -> None:
    """Three hours and more of finished jobs behind the watermark, beside waiting jobs: the rounds
    that catch up, an hour each, read every finished job of the window once and nothing else."""
    run_round()
    later_now = NOW + timedelta(hours=3, minutes=20)
    gap = [
        finished(f"k{i % 3}", "q", ("completed", "failed", "cancelled")[i % 3], NOW + timedelta(minutes=i, seconds=7))
        for i in range(0, 200, 2)
    ]
    JobFactory.create_batch(60, kind="k0", queue="q", state="available")
    JobFactory.create_batch(60, kind="k0", queue="q", state="scheduled", run_at=later_now + timedelta(hours=1))
    # Finished jobs no round reads: before the window and past the clock. They take the first and
    # last bins of each partition's finish-time histogram, where the planner would read an index's
    # extreme entry to estimate a round's range (one row, and not the rollup's reading).
    for state in ("completed", "failed"):
        for at in (NOW - timedelta(days=3), NOW - timedelta(days=2), later_now + timedelta(days=1, hours=1)):
            finished("k0", "q", state, at)
        finished("k0", "q", state, later_now + timedelta(days=2))
    with connection.cursor() as cursor:
        # Statistics that say what the tables hold: an hour is a third of the window's finished
        # rows here, where the planner left to itself reads a partition whole for every round.
        cursor.execute("ANALYZE awa_job, awa_job_done")
        cursor.execute("SELECT pg_stat_force_next_flush()")  # this session's reads are counted before

    async def catch_up() -> list[RollupBounds]:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            rounds = [await roll_up_history(conn, later_now)]
            while rounds[-1].catching_up:
                rounds.append(await roll_up_history(conn, later_now))
            await conn.execute("SELECT pg_stat_force_next_flush()")  # flushed before the reply
            return rounds

    before = job_rows_read()
    rounds = asyncio.run(catch_up())
    read = job_rows_read() - before

    assert len(rounds) == 4  # an hour a round, and the last one up to the current minute
    assert read == len(gap)
    assert_same(stored_rows(), expected_rows(gap))


def test_history_open_transaction_max__below_the_catch_up__a_held_round_reaches_the_current_minute() -> None:
    """A round starts at the watermark, which an open transaction holds at most the bound back: the
    round's range (at most HISTORY_CATCH_UP_MINUTES) must reach the current minute from there, or
    the duty would repeat a round that never catches up."""
    held_minutes = math.ceil(defaults.HISTORY_OPEN_TRANSACTION_MAX / 60) + 1  # the minute it began in, too
    assert held_minutes < defaults.HISTORY_CATCH_UP_MINUTES
