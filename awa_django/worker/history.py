"""The console's history rollup: the maintenance leader folds the jobs finalised in the open
minutes into ``awa_history`` (per minute, per kind and per queue), then moves a watermark.

A round, in one transaction:

1. ``lock_history_mark`` locks the watermark row (``closed_through``: every minute before it is
   final) and reads the database's clock;
2. ``rollup_bounds`` picks the round's minutes: from the watermark (or the window's start) up to
   and including the current minute, at most ``HISTORY_CATCH_UP_MINUTES`` of them;
3. ``delete_history_minutes`` clears those minutes (and the minutes past the window);
4. ``roll_up_history`` recomputes them from awa_job_all (the hot table's finished leftovers and
   awa_job_done's partitions), through each one's finished-time index: ``pin_history_reads``
   keeps the planner off sequential scans, which would read a whole partition for every round;
5. ``advance_history_mark`` moves the watermark to the first minute not yet final: a minute is
   final once ``HISTORY_GRACE`` seconds passed after its end (a finalising transaction stamps
   ``finalized_at`` when it starts and commits a moment later).

What a round reads: its own minutes' finished jobs, once. A final minute is behind the watermark
and never read again, so a new leader catching up over hours (an hour a round) reads each
finished job of the window once; only the open minutes (the current one and the one in its grace)
are recomputed by every round until they are final.

Replacing whole minutes makes a round idempotent: running it twice, or from two leaders (the row
lock makes the second wait and then read the first's watermark), gives the same rows. A missed
tick or a change of leader costs nothing: the watermark is in the database, and the next round
reads from it. What the rollup cannot see: a job deleted by retention before its minute was
rolled up (only if the retention is shorter than the grace plus the time the leader was away),
and a finalising transaction that commits more than the grace after it started (its minute is
already final). Attempts that failed and will retry are not finished jobs and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_django import defaults
from awa_django.sql import statements

__all__ = ["RollupBounds", "roll_up_history", "rollup_bounds"]

MINUTE = timedelta(minutes=1)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class RollupBounds:
    """One round's minutes, ``start <= minute < stop``; ``closed_through``: the new watermark;
    ``expired``: minutes before it leave the table; ``catching_up``: the round stopped short of
    the current minute (the next round should follow at once)."""

    start: datetime
    stop: datetime
    closed_through: datetime
    expired: datetime
    catching_up: bool


def rollup_bounds(
    closed_through: datetime | None,
    now: datetime,
    *,
    window_minutes: int = defaults.HISTORY_WINDOW_MINUTES,
    grace: float = defaults.HISTORY_GRACE,
    catch_up_minutes: int = defaults.HISTORY_CATCH_UP_MINUTES,
) -> RollupBounds:
    """The minutes a round recomputes, given the watermark and the database's clock.

    Never before the window (a watermark from a leader that was away a day starts over at the
    window), never past the current minute, at most ``catch_up_minutes`` at once; the watermark
    moves to the first minute that is not final yet, and never backwards.
    """
    current = _minute(now)
    expired = current - (window_minutes - 1) * MINUTE
    start = expired if closed_through is None else max(_minute(closed_through), expired)
    start = min(start, current)
    stop = min(start + catch_up_minutes * MINUTE, current + MINUTE)
    final_before = _minute(now - timedelta(seconds=grace))  # a minute ended `grace` ago is final
    closed = max(min(final_before, stop), start)
    return RollupBounds(start, stop, closed, expired, catching_up=stop <= current)


async def roll_up_history(
    conn: psycopg.AsyncConnection[Any],
    now: datetime | None = None,
    *,
    top: int = defaults.HISTORY_TOP,
) -> RollupBounds:
    """One rollup round on ``conn`` (autocommit: the round opens its own transaction). ``now``
    stands in for the database's clock (tests); returns the minutes it wrote."""
    async with conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["lock_history_mark"], {"now": now})
            row = await cursor.fetchone()
        assert row is not None  # the upsert always returns its row
        bounds = rollup_bounds(row["closed_through"], row["now"])
        await conn.execute(statements["pin_history_reads"])
        await conn.execute(
            statements["delete_history_minutes"],
            {"start": bounds.start, "stop": bounds.stop, "expired": bounds.expired},
        )
        await conn.execute(statements["roll_up_history"], {"start": bounds.start, "stop": bounds.stop, "top": top})
        await conn.execute(statements["advance_history_mark"], {"closed_through": bounds.closed_through})
    return bounds
