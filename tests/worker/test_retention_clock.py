"""Retention reads its clock and its durations exactly, whatever the server's time zone, and a
sweep that could not make a partition leaves no gap behind it.

- The worker's connections use the server's default time zone (Django's set theirs to UTC), and a
  timestamp read in a zone with daylight saving, subtracted in Python, is wall-clock arithmetic:
  across the change `now - keep` was an hour off and partitions were dropped an hour early.
- psycopg sends a day as ``1 day``, which Postgres adds in the session's zone: a 23-hour day in
  the sweeps' `now() - retention`. The worker's connections send durations as microseconds.
- A create refused for its locks (or raced by another leader) ended the range's chance: the next
  range was made, and the next sweep planned after it, leaving the refused one's jobs in the
  DEFAULT partition for good.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.dbparams import connection_kwargs
from awa_django.worker import retention
from awa_django.worker.retention import floor_to
from tests.harness import drop_range_partitions, make_config, run_on_worker_connection

DST_ZONE = "America/New_York"
SPRING_FORWARD = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 02:00 EST -> 03:00 EDT
FALL_BACK = datetime(2026, 11, 1, 6, 0, tzinfo=UTC)  # 02:00 EDT -> 01:00 EST


@pytest.mark.django_db(transaction=True)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    instant=st.sampled_from([SPRING_FORWARD, FALL_BACK]).flatmap(
        lambda change: st.integers(-3 * 86400, 3 * 86400).map(lambda s: change + timedelta(seconds=s))
    ),
    duration=st.one_of(
        st.sampled_from([timedelta(days=1), timedelta(days=7), timedelta(hours=25), timedelta(days=-1)]),
        st.timedeltas(min_value=timedelta(days=-400), max_value=timedelta(days=400)),
    ),
)
def test_worker_connection__durations_are_exact_in_a_dst_zone(instant: datetime, duration: timedelta) -> None:
    with psycopg.connect(**connection_kwargs("default")) as conn:
        conn.execute(f"SET TIME ZONE '{DST_ZONE}'")  # a constant
        row = conn.execute(
            "SELECT %(t)s::timestamptz - %(d)s::interval, %(t)s::timestamptz + %(d)s::interval",
            {"t": instant, "d": duration},
        ).fetchone()
    assert row is not None
    assert (row[0], row[1]) == (instant - duration, instant + duration)


@pytest.mark.django_db(transaction=True)
def test_clock_and_bounds__read_in_utc_in_a_dst_zone() -> None:
    drop_range_partitions()
    config = make_config(["default"], completed_retention=3600.0, failed_retention=3600.0)

    async def read(conn: Any) -> tuple[datetime, dict[str, list[retention.Partition]]]:
        await conn.execute(f"SET TIME ZONE '{DST_ZONE}'")  # a constant
        await retention.ensure_partitions(conn, config)
        return await retention._database_now(conn), await retention.list_partitions(conn)

    now, partitions = run_on_worker_connection(read)
    assert now.tzinfo is UTC
    bounds = [moment for found in partitions.values() for p in found for moment in (p.lower, p.upper)]
    assert bounds
    assert all(moment.tzinfo is UTC for moment in bounds)


def ranges(partitions: list[retention.Partition]) -> list[tuple[datetime, datetime]]:
    return sorted((p.lower, p.upper) for p in partitions)


@pytest.mark.django_db(transaction=True)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(refusals=st.lists(st.booleans(), min_size=1, max_size=12))
def test_sweeps_with_refused_creates__leave_the_ranges_contiguous(
    refusals: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whichever creates are refused (a busy lock, another leader's partition), the partitions the
    sweeps made run without a gap from the first one, which covers now, to the last."""
    drop_range_partitions()
    config = make_config(["default"], completed_retention=600.0, failed_retention=600.0)  # 1-minute widths
    real_create = retention._create
    answers = iter(refusals)

    async def create(conn: Any, branch: Any, lower: datetime, upper: datetime) -> bool | None:
        if next(answers, False):
            return None  # refused this sweep, as _create answers for busy locks
        return await real_create(conn, branch, lower, upper)

    monkeypatch.setattr(retention, "_create", create)

    async def sweeps(conn: Any) -> tuple[datetime, dict[str, list[retention.Partition]]]:
        start = await retention._database_now(conn)
        for _ in range(len(refusals) + 2):
            await retention.ensure_partitions(conn, config)
        return start, await retention.list_partitions(conn)

    start, partitions = run_on_worker_connection(sweeps)
    for branch in retention.BRANCHES:
        made = ranges(partitions[branch.table])
        assert made, branch.table
        assert made[0][0] == floor_to(start, timedelta(minutes=1))  # the first sweep's current range
        assert all(upper == lower for (_, upper), (lower, _) in pairwise(made)), made


@pytest.mark.django_db(transaction=True)
def test_two_leaders_creating_and_dropping_at_once__neither_fails() -> None:
    drop_range_partitions()
    config = make_config(["default"], completed_retention=600.0, failed_retention=600.0)
    branch = retention.BRANCHES[0]
    old_lower = floor_to(datetime.now(UTC), timedelta(minutes=1)) - timedelta(hours=2)

    async def both(conn: Any) -> tuple[list[str], list[str], list[str]]:
        from awa_django.worker.db import connect

        other = await connect("default", purpose="test")
        try:
            assert await retention._create(conn, branch, old_lower, old_lower + timedelta(minutes=1))
            made = await asyncio.gather(
                retention.ensure_partitions(conn, config), retention.ensure_partitions(other, config)
            )
            dropped = await asyncio.gather(retention.drop_expired(conn, config), retention.drop_expired(other, config))
        finally:
            await other.close()
        return made[0] + made[1], dropped[0], dropped[1]

    made, dropped_here, dropped_there = run_on_worker_connection(both)
    assert len(made) == len(set(made))  # each range made once, by one of them
    assert sorted(dropped_here + dropped_there) == [retention.partition_name(branch, old_lower)]
