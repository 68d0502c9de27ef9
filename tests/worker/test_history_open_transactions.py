"""The history rollup counts a job finished by a long transaction (``worker/history.py``, the close
rule): a finalising write stamps ``finalized_at`` with its transaction's start, and an atomic
handler that runs for minutes commits its job's completion long after that minute ended. The
rollup keeps every minute from the start of the oldest open transaction open, so the round after
the commit still recomputes it; a session open longer than ``HISTORY_OPEN_TRANSACTION_MAX`` holds
nothing, and the leader logs it once.

The rounds are given the database's clock moved on (``roll_up_history(now=...)``) rather than
waiting real minutes; the open transactions are real, seen in ``pg_stat_activity``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.db.models import Sum

from awa_django import defaults
from awa_django.models import HistoryMinute, Job, JobState
from awa_django.registry import JobHandler, registry
from awa_django.testing import run_jobs
from awa_django.worker.history import OpenTransactionLog, RollupBounds, roll_up_history
from tests.conftest import connection_params
from tests.harness import database_now

KIND = "history.long_atomic"
MINUTE = timedelta(minutes=1)


def long_handler() -> None:
    with connection.cursor() as cursor:  # a statement: the completion commits with the handler's transaction
        cursor.execute("SELECT 1")


@pytest.fixture
def atomic_kind() -> Iterator[str]:
    registry.register(JobHandler(KIND, long_handler, queue="history_long", atomic=True))
    try:
        yield KIND
    finally:
        registry.unregister(KIND)


def caught_up(now: datetime) -> list[RollupBounds]:
    """Rounds at the clock ``now`` until one reached the current minute, on a connection of their own."""

    async def rounds() -> list[RollupBounds]:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            done = [await roll_up_history(conn, now)]
            while done[-1].catching_up:
                done.append(await roll_up_history(conn, now))
            return done

    return asyncio.run(rounds())


def counted(kind: str) -> int:
    total = HistoryMinute.objects.filter(dimension="kind", name=kind).aggregate(n=Sum("completed"))["n"]
    return int(total or 0)


@pytest.mark.django_db(transaction=True)
def test_rollup__atomic_handler_commits_after_its_minute_would_be_final__its_job_is_counted_once(
    atomic_kind: str,
) -> None:
    with transaction.atomic():
        started = database_now()  # the transaction's start: what its completion stamps
        job = Job.objects.enqueue(atomic_kind)
        run_jobs(kind=atomic_kind)  # the atomic handler and its completion, in this open transaction
        job.refresh_from_db()
        assert (job.state, job.finalized_at) == (JobState.COMPLETED, started)
        # Two minutes on (the handler ran long), the rollup closes the minutes it may close.
        held = caught_up(started + 2 * MINUTE)[-1]
        assert held.oldest_open is not None and held.oldest_open.xact_start == started
        assert held.closed_through <= started  # the job's minute is still open
    rounds = caught_up(started + 2 * MINUTE + timedelta(seconds=10))  # the next round, after the commit

    assert rounds[-1].closed_through > started  # nothing holds it any more: the minute is final
    assert counted(atomic_kind) == 1
    minute = started.replace(second=0, microsecond=0)
    assert HistoryMinute.objects.get(dimension="kind", name=atomic_kind).minute == minute


@pytest.fixture
def idle_session(transactional_db: None) -> Iterator[psycopg.Connection[Any]]:
    """A session of another app, left idle in a transaction."""
    conn = psycopg.connect(**connection_params())
    try:
        yield conn
    finally:
        conn.close()


@pytest.mark.django_db(transaction=True)
def test_rollup__a_session_idle_in_transaction_past_the_bound__holds_nothing_and_is_logged_once(
    idle_session: psycopg.Connection[Any], caplog: pytest.LogCaptureFixture
) -> None:
    row = idle_session.execute("SELECT now()").fetchone()  # opens its transaction, left open
    assert row is not None
    since: datetime = row[0]
    limit = timedelta(seconds=defaults.HISTORY_OPEN_TRANSACTION_MAX)

    within = caught_up(since + limit - MINUTE)[-1]  # open for less than the bound: it holds
    assert within.oldest_open is not None and within.oldest_open.pid == idle_session.info.backend_pid
    assert within.passed_over is None
    assert within.closed_through <= since

    # 25 s into a minute: the second round, 10 s on, is past that minute's grace and closes one
    # more minute than the first. Each round is judged against its own clock (the test once
    # expected the first's for both, and failed whenever `since` fell 20 to 30 s into a minute).
    later = (since + limit + 5 * MINUTE).replace(second=25, microsecond=0)
    times = [later, later + timedelta(seconds=10)]
    rounds = [caught_up(at)[-1] for at in times]
    for at, bounds in zip(times, rounds, strict=True):  # past the bound: the final minutes close
        assert bounds.passed_over is not None and bounds.passed_over.pid == idle_session.info.backend_pid
        assert bounds.passed_over.state == "idle in transaction"
        assert bounds.oldest_open is None
        assert bounds.closed_through == (at - timedelta(seconds=defaults.HISTORY_GRACE)).replace(
            second=0, microsecond=0
        )

    log = OpenTransactionLog()
    with caplog.at_level(logging.WARNING, logger="awa_django.worker.history"):
        for bounds in rounds:
            log.note(bounds)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once per transaction, not once per round
    assert f"pid={idle_session.info.backend_pid}" in warnings[0]
    assert "HISTORY_OPEN_TRANSACTION_MAX" in warnings[0]


@pytest.mark.django_db(transaction=True)
def test_rollup__no_other_transaction_open__the_rounds_own_holds_nothing() -> None:
    now = database_now() + 3 * MINUTE
    bounds = caught_up(now)[-1]
    assert (bounds.oldest_open, bounds.passed_over) == (None, None)
    assert bounds.closed_through == (now - timedelta(seconds=defaults.HISTORY_GRACE)).replace(second=0, microsecond=0)
