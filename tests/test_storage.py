"""History out of the hot path (migration 0023, issue 43): where a job's row lives, read from the
database after each write, and the partitions retention keeps.

- A job waiting or running is in ``awa_job``; a finished job is in ``awa_job_done`` (in the partition
  of its finish time), unless it keeps its unique key past its end; ``Job.objects`` sees both.
- Every writer puts a finishing row in the right place: the hot path's statements (complete_jobs,
  finalize_jobs), the trigger behind everything else (rescue, cancel), writes through the model.
- Retention's partitions: the pure plan (hypothesis), then created, filled and dropped for real.
- A completion's buffers do not grow with the history.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from hypothesis import given
from hypothesis import strategies as st

from awa_django.exceptions import UniqueJobConflictError
from awa_django.models import Job, JobEdge, JobState
from awa_django.models import Workflow as WorkflowRow
from awa_django.services.jobs import cancel_jobs, retry_jobs
from awa_django.sql import statements
from awa_django.worker import retention
from awa_django.worker.retention import (
    AHEAD,
    MAX_SLICES,
    SLICES,
    WIDTHS,
    Partition,
    floor_to,
    plan_creates,
    plan_drops,
    width_for,
)
from tests.harness import drop_range_partitions, make_config, run_on_worker_connection

FINISHED = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


def where(job_id: int) -> list[str]:
    """The tables holding the job's row: awa_job, or the branch of awa_job_done (completed or
    failed), read directly."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 'awa_job' FROM awa_job WHERE id = %s"
            " UNION ALL SELECT i.inhparent::regclass::text FROM awa_job_done AS j"
            " JOIN pg_inherits AS i ON i.inhrelid = j.tableoid WHERE j.id = %s",
            [job_id, job_id],
        )
        return [row[0] for row in cursor.fetchall()]


def partition_of(job_id: int) -> list[str]:
    """The awa_job_done partition holding the job's row."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM awa_job_done WHERE id = %s", [job_id])
        return [row[0] for row in cursor.fetchall()]


def claim(job_id: int) -> int:
    """Mark the job running as a claim does; return its lease."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa_job SET state = 'running', attempt = attempt + 1, run_lease = run_lease + 1,"
            " attempted_at = now(), heartbeat_at = now() WHERE id = %s RETURNING run_lease",
            [job_id],
        )
        return int(cursor.fetchone()[0])


def finish(job_id: int, lease: int, outcome: str) -> list[int]:
    """The worker's writer: a bare completion (the batch's statement, or an atomic attempt's
    one-row one), or another outcome through finalize_jobs."""
    with connection.cursor() as cursor:
        if outcome == "complete":
            cursor.execute(statements["complete_jobs"], {"ids": [job_id], "leases": [lease]})
        elif outcome == "complete_one":
            cursor.execute(statements["complete_job"], {"id": job_id, "lease": lease})
        else:
            state, result = (JobState.COMPLETED, '{"x": 1}') if outcome == "complete_with_result" else (outcome, None)
            cursor.execute(
                statements["finalize_jobs"],
                {
                    "ids": [job_id],
                    "leases": [lease],
                    "states": [state],
                    "delays": [None],
                    "errors": [None if state == JobState.COMPLETED else '{"error": "boom", "attempt": 1}'],
                    "refunds": [0],
                    "progress": [None],
                    "results": [result],
                },
            )
        return [row[0] for row in cursor.fetchall()]


def expected_home(state: str, unique_states: list[str] | None) -> str:
    if state in FINISHED and not (unique_states is not None and state in unique_states):
        return "awa_job_done_completed" if state == JobState.COMPLETED else "awa_job_done_failed"
    return "awa_job"


@pytest.mark.django_db
def test_tables__hot_and_finished_have_the_same_columns_in_the_same_order_as_the_view() -> None:
    def columns(table: str) -> list[tuple[str, str]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                [table],
            )
            return list(cursor.fetchall())

    hot = columns("awa_job")

    assert columns("awa_job_done") == hot, "a column added to awa_job must be added to awa_job_done, last"
    assert columns("awa_job_all") == hot, "recreate the view awa_job_all after adding a column"
    assert {name for name, _ in hot} == {field.column for field in Job._meta.concrete_fields}


OUTCOMES = ("complete", "complete_one", "complete_with_result", JobState.FAILED, JobState.CANCELLED, JobState.RETRYABLE)


@pytest.mark.django_db
@given(
    outcome=st.sampled_from(OUTCOMES),
    unique=st.sampled_from([None, "active", "forever"]),
)
def test_writer__a_finished_job_leaves_the_hot_table_unless_it_keeps_its_unique_key(
    outcome: str, unique: str | None
) -> None:
    options: Any = {None: None, "active": True, "forever": {"states": [s.value for s in JobState]}}[unique]
    with transaction.atomic():
        job = Job.objects.enqueue("noop", {"n": 1}, unique=options)
        lease = claim(job.pk)

        ended = finish(job.pk, lease, outcome)

        row = Job.objects.get(pk=job.pk)
        assert ended == [job.pk]
        assert where(job.pk) == [expected_home(row.state, row.unique_states)]
        if outcome == "complete_with_result":
            assert row.result == {"x": 1}
        if unique is not None:
            # The key is held exactly while the job is in one of its unique states.
            held = row.state in (row.unique_states or [])
            try:
                with transaction.atomic():
                    Job.objects.enqueue("noop", {"n": 1}, unique=options)
                refused = False
            except UniqueJobConflictError:
                refused = True
            assert refused == held, (row.state, row.unique_states)
        transaction.set_rollback(True)


def test_complete_job__is_complete_jobs_for_one_row() -> None:
    """complete_job exists for its plan only (complete_job.sql): the rest of its text must stay
    complete_jobs', or the two completions would drift apart."""
    batch, one = statements["complete_jobs"], statements["complete_job"]
    assert one == batch.replace(
        "    USING unnest(%(ids)s::bigint[], %(leases)s::bigint[]) AS d(id, lease)\n    WHERE j.id = d.id\n",
        "    WHERE j.id = %(id)s::bigint\n",
    ).replace("      AND j.run_lease = d.lease\n", "      AND j.run_lease = %(lease)s::bigint\n")
    assert one != batch


@pytest.mark.django_db
def test_writer__a_late_write_of_a_lost_lease_moves_nothing() -> None:
    job = Job.objects.enqueue("noop", {})
    lease = claim(job.pk)
    claim(job.pk)  # rescued and claimed again: the first attempt's lease is stale

    assert finish(job.pk, lease, "complete") == []
    assert finish(job.pk, lease, "complete_one") == []
    assert finish(job.pk, lease, JobState.FAILED) == []
    assert where(job.pk) == ["awa_job"]
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


@pytest.mark.django_db
def test_other_writers__rescue_cancel_and_retry_move_the_row_both_ways() -> None:
    rescued = Job.objects.enqueue("noop", {}, max_attempts=1)
    claim(rescued.pk)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa_job SET heartbeat_at = now() - interval '1 hour' WHERE id = %s", [rescued.pk])
        rescue: dict[str, Any] = {"staleness": timedelta(seconds=30), "limit": 10}
        cursor.execute(statements["rescue_stale_jobs"], rescue)
    cancelled = Job.objects.enqueue("noop", {})

    assert cancel_jobs([cancelled.pk], reason="test") == 1
    assert Job.objects.get(pk=rescued.pk).state == JobState.FAILED
    assert where(rescued.pk) == ["awa_job_done_failed"]
    assert where(cancelled.pk) == ["awa_job_done_failed"]

    assert retry_jobs([rescued.pk, cancelled.pk]) == 2
    assert where(rescued.pk) == ["awa_job"] and where(cancelled.pk) == ["awa_job"]
    assert set(Job.objects.filter(pk__in=[rescued.pk, cancelled.pk]).values_list("state", flat=True)) == {
        JobState.AVAILABLE
    }


@pytest.mark.django_db
def test_model__writes_through_the_view_land_in_the_right_table() -> None:
    made = Job.objects.create(kind="noop", queue="default", state=JobState.COMPLETED, finalized_at=None)
    assert where(made.pk) == ["awa_job_done_completed"]
    assert Job.objects.get(pk=made.pk).finalized_at is not None  # a finished row always has its time

    Job.objects.filter(pk=made.pk).update(state=JobState.FAILED)
    assert where(made.pk) == ["awa_job_done_failed"]

    Job.objects.filter(pk=made.pk).update(state=JobState.AVAILABLE, finalized_at=None)
    assert where(made.pk) == ["awa_job"]

    fetched = Job.objects.get(pk=made.pk)
    fetched.state = JobState.CANCELLED
    fetched.save()
    assert where(made.pk) == ["awa_job_done_failed"]

    assert Job.objects.filter(pk=made.pk).delete()[0] == 1
    assert where(made.pk) == []


# -- Partitions: the plan ---------------------------------------------------------------------------

moments = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC))


@given(now=moments, width=st.sampled_from(WIDTHS), old_width=st.sampled_from(WIDTHS), back=st.integers(-3, 5))
def test_plan_creates__covers_now_to_ahead_contiguously_aligned_and_after_what_exists(
    now: datetime, width: timedelta, old_width: timedelta, back: int
) -> None:
    # What exists: one partition of an older width ending `back` old widths after the current one.
    existing = []
    if back >= -2:
        upper = floor_to(now, old_width) + back * old_width
        existing = [Partition("awa_job_done_completed", "p", upper - old_width, upper)]

    ranges = plan_creates(existing, now, width)

    start = max([floor_to(now, width), *(p.upper for p in existing)])
    covered = start
    for lower, upper in ranges:
        assert lower == covered, "contiguous, from the end of what exists (or the current width)"
        assert upper > lower and upper - lower <= width
        assert floor_to(upper, width) == upper, "each ends on a multiple of the width"
        covered = upper
    assert covered >= now + AHEAD * width or (not ranges and start >= now + AHEAD * width)
    assert all(lower >= p.upper for lower, _ in ranges for p in existing), "never over an existing one"


def test_width_for__the_default_retentions__an_hour_for_a_day_six_hours_for_a_week() -> None:
    """The partition every completion writes holds an hour of a day's jobs (docs/storage.md)."""
    assert width_for(timedelta(days=1)) == timedelta(hours=1)
    assert width_for(timedelta(days=7)) == timedelta(hours=6)
    assert width_for(timedelta(days=30)) == timedelta(days=1)
    assert width_for(timedelta(minutes=5)) == timedelta(minutes=1)  # the narrowest: 24 slices cannot be
    assert width_for(timedelta(hours=1)) == timedelta(minutes=10)  # a minute would make 60
    assert width_for(timedelta(hours=3)) == timedelta(minutes=10)
    assert width_for(timedelta(days=3)) == timedelta(hours=6)  # an hour would make 72


@given(now=moments, keep=st.timedeltas(min_value=timedelta(minutes=1), max_value=timedelta(days=30)))
def test_plan_drops__exactly_the_partitions_wholly_past_the_retention(now: datetime, keep: timedelta) -> None:
    width = width_for(keep)
    narrower = [w for w in WIDTHS if w < width]
    assert keep / width <= MAX_SLICES or width == WIDTHS[0], "never more than MAX_SLICES partitions"
    if width * SLICES > keep:  # wider than a SLICES-th: the narrowest, or the one below would make too many
        assert not narrower or keep / narrower[0] > MAX_SLICES, (keep, width)
    else:  # the widest within a SLICES-th
        wider = [w for w in WIDTHS if w > width]
        assert not wider or wider[-1] * SLICES > keep, (keep, width)
    existing = [
        Partition("b", f"p{i}", floor_to(now, width) - i * width, floor_to(now, width) - (i - 1) * width)
        for i in range(0, 40)
    ]

    dropped = set(plan_drops(existing, now, keep))

    for partition in existing:
        assert (partition in dropped) == (partition.upper <= now - keep)
        if partition not in dropped:  # what stays may hold a row younger than the retention
            assert partition.upper > now - keep


# -- Partitions: for real ---------------------------------------------------------------------------


@pytest.fixture
def no_partitions(transactional_db: None) -> None:
    """Start with the DEFAULT partitions only (leaders of earlier tests in this database made some)."""
    drop_range_partitions()


@pytest.mark.usefixtures("no_partitions")
def test_partitions__created_ahead_take_over_their_rows_from_the_default_and_receive_new_ones() -> None:
    # Retentions of a day and two: hour partitions (retention.width_for: a 24th of the retention).
    config = make_config(["default"], completed_retention=86400.0, failed_retention=172800.0)
    early = Job.objects.create(kind="noop", state=JobState.COMPLETED)  # before any partition exists
    assert partition_of(early.pk) == ["awa_job_done_completed_default"]

    created = run_on_worker_connection(retention.ensure_partitions, config)

    hour = timedelta(hours=1)
    assert len(created) == 2 * (AHEAD + 1), created  # each branch: the current hour and AHEAD more
    current = retention.partition_name(retention.BRANCHES[0], floor_to(datetime.now(UTC), hour))
    assert partition_of(early.pk) == [current]
    late = Job.objects.enqueue("noop", {})
    finish(late.pk, claim(late.pk), "complete")
    assert partition_of(late.pk) == [current]
    assert run_on_worker_connection(retention.ensure_partitions, config) == [], "nothing more to create within the hour"


@pytest.mark.usefixtures("no_partitions")
def test_partitions__past_the_retention_are_dropped_whole_with_their_steps_edges_and_empty_workflows() -> None:
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)
    branch = retention.BRANCHES[0]
    now = datetime.now(UTC)
    old_lower = floor_to(now, timedelta(hours=1)) - timedelta(hours=3)

    async def old_partition(conn: Any) -> bool | None:
        return await retention._create(conn, branch, old_lower, old_lower + timedelta(hours=1))

    assert run_on_worker_connection(old_partition)
    workflow = WorkflowRow.objects.create(name="old")
    up = Job.objects.create(kind="noop", state=JobState.COMPLETED, finalized_at=old_lower + timedelta(minutes=5))
    down = Job.objects.create(
        kind="noop", state=JobState.COMPLETED, workflow_id=workflow.pk, finalized_at=old_lower + timedelta(minutes=6)
    )
    JobEdge.objects.create(upstream_id=up.pk, downstream_id=down.pk, name="up")
    fresh = Job.objects.create(kind="noop", state=JobState.COMPLETED, finalized_at=now)
    old_name = retention.partition_name(branch, old_lower)
    assert partition_of(down.pk) == [old_name]

    dropped = run_on_worker_connection(retention.drop_expired, config)

    assert dropped == [old_name]
    assert not Job.objects.filter(pk__in=[up.pk, down.pk]).exists()
    assert Job.objects.filter(pk=fresh.pk).exists()
    assert not JobEdge.objects.filter(downstream_id=down.pk).exists()
    assert not WorkflowRow.objects.filter(pk=workflow.pk).exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s)", [old_name])
        assert cursor.fetchone()[0] is None


# -- The hot path's cost ----------------------------------------------------------------------------


def completion_buffers(jobs: int) -> float:
    """Shared buffers one complete_jobs batch of ``jobs`` running jobs touches, per job (rolled back)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,"
            " errors, metadata, tags, run_lease, attempted_at, heartbeat_at)"
            " SELECT 'noop', 'buffers', jsonb_build_object('n', g), 'running', 2, 1, 25, now(), now(), '[]', '{}',"
            " '{}', 1, now(), now() FROM generate_series(1, %s) AS g RETURNING id",
            [jobs],
        )
        ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statements["complete_jobs"],
            {"ids": ids, "leases": [1] * len(ids)},
        )
        plan = cursor.fetchone()[0][0]["Plan"]
        transaction.set_rollback(True)
    return (int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])) / jobs


def add_history(rows: int, days: int) -> None:
    """``rows`` finished jobs spread over the ``days`` before today, in range partitions of their own
    (as retention keeps them), none in today's."""
    today = floor_to(datetime.now(UTC), timedelta(days=1))

    async def partitions(conn: Any) -> None:
        for branch in retention.BRANCHES:
            for day in range(1, days + 1):
                lower = today - day * timedelta(days=1)
                assert await retention._create(conn, branch, lower, lower + timedelta(days=1))

    run_on_worker_connection(partitions)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job_done (id, kind, queue, args, state, priority, attempt, max_attempts, run_at,"
            " finalized_at, created_at, errors, metadata, tags, run_lease, fair_key, pending)"
            " SELECT nextval(pg_get_serial_sequence('awa_job', 'id')), 'noop', 'history', jsonb_build_object('n', g),"
            " CASE WHEN g %% 20 = 0 THEN 'failed' ELSE 'completed' END, 2, 1, 25, %s - interval '1 hour',"
            " %s - (1 + g %% (%s * 86399)) * interval '1 second', %s - interval '1 hour', '[]', '{}', '{}', 1, '', 0"
            " FROM generate_series(1, %s) AS g",
            [today, today, days, today, rows],
        )
        cursor.execute("ANALYZE awa_job_done")
        cursor.execute("ANALYZE awa_job")


@pytest.mark.usefixtures("no_partitions")
def test_completion__buffers_per_job_flat_from_no_history_to_200000_finished_jobs() -> None:
    batch = 200
    # A retention of 30 days: day partitions (retention.width_for), so the measured batches meet a
    # new partition only at midnight, not at every hour's turn (a fresh partition's btrees are a
    # level shallower until they split: see below).
    run_on_worker_connection(retention.ensure_partitions, make_config(["default"], completed_retention=30 * 86400.0))
    # Today's partition's btrees first take a batch of 2,000 (rolled back: the index entries stay
    # until a vacuum), so that each has its root above its leaves before anything is measured. A
    # root split is a buffer more per job and index, and comes with today's own volume, history or
    # not: with 16-byte entries it came after the measured batches, with (finalized_at) INCLUDE
    # (id)'s 24 bytes (migration 0026) within them, and read as a 19 % growth.
    completion_buffers(2_000)
    before = min(completion_buffers(batch) for _ in range(3))

    add_history(200_000, days=3)
    after = min(completion_buffers(batch) for _ in range(3))

    # The history is 1,000 times the batch, in the partitions of the days before: a cost that grew
    # with it (a scan, a plan over the finished rows, the old in-place update's index of every
    # finished job) would show as a multiple. (Today's own partition does grow within the day, its
    # btrees a level deeper now and then: that is the day's volume, the same with or without history.)
    assert after <= before * 1.1 + 1, f"{before:.1f} buffers per completed job with no history, {after:.1f} after"
