"""The console's history rollup: the maintenance leader folds the jobs finalised in the open
minutes into ``awa_history`` (per minute, per kind and per queue), then moves a watermark.

A round, in one transaction:

1. ``lock_history_mark`` locks the watermark row (``closed_through``: every minute before it is
   final) and reads the database's clock;
2. ``read_open_transactions`` reads the oldest transaction open in this database, the round's own
   aside, that started less than ``HISTORY_OPEN_TRANSACTION_MAX`` ago (and the oldest older one);
3. ``rollup_bounds`` picks the round's minutes: from the watermark (or the window's start) up to
   and including the current minute, at most ``HISTORY_CATCH_UP_MINUTES`` of them;
4. ``delete_history_minutes`` clears those minutes (and the minutes past the window);
5. ``roll_up_history`` recomputes them from awa_job_all (the hot table's finished leftovers and
   awa_job_done's partitions), through each one's finished-time index: ``pin_history_reads``
   keeps the planner off sequential scans, which would read a whole partition for every round;
6. ``advance_history_mark`` moves the watermark to the first minute not yet final.

When a minute is final (the close rule): every finished job is counted exactly once, however long
the transaction that finished it ran. A finalising write stamps ``finalized_at`` with its
transaction's ``now()``, its start, and the row is visible only from its commit: an atomic
handler's transaction (``worker/atomic.py``), a release that cancels dependents, any transaction
that ends jobs, can commit minutes after the minute its jobs are stamped in. So a minute is final
once both hold:

- ``HISTORY_GRACE`` seconds passed after its end (the short transactions, and the sessions the
  rollup cannot see: below);
- no transaction open in this database at step 2 started in it or before it, but those open longer
  than ``HISTORY_OPEN_TRANSACTION_MAX``: the watermark stays at the minute of the oldest one's
  ``xact_start`` (which is its ``now()``), and every round recomputes the minutes from there.

Why reading ``pg_stat_activity`` once, before ``roll_up_history``, is enough: a transaction that
commits after ``roll_up_history``'s snapshot was either open at step 2 (it holds the watermark at
or before its minute) or started after step 2, so after the round's ``now()``, and stamps a
minute the round does not close. One that committed before the snapshot is read by this round,
or by a later one if its minute is past this round's range (a catch-up), as no round closes a
minute it did not read.

The bound: a session left idle in a transaction (an unrelated app's, a forgotten psql) would hold
the watermark for ever, and every round would re-read more minutes. An open transaction older than
``HISTORY_OPEN_TRANSACTION_MAX`` holds nothing; the round reports it (``passed_over``) and the
leader logs a warning naming its pid, once per transaction. A job such a transaction finishes is not
counted if it commits after its minute closed. While a transaction holds the minutes, a round reads
the finished jobs from its start minute on (a long one costs up to that many minutes a round; the
leader spaces rounds by their cost). Not seen, so not held for (the grace still covers their short
transactions): sessions of another role when the leader's role lacks ``pg_read_all_stats``, and
prepared (two-phase) transactions.

What a round reads: its own minutes' finished jobs, once. A final minute is behind the watermark
and never read again, so a new leader catching up over hours (an hour a round) reads each
finished job of the window once; only the open minutes (the current one, the one in its grace, and
those an open transaction holds) are recomputed by every round until they are final.

Replacing whole minutes makes a round idempotent: running it twice, or from two leaders (the row
lock makes the second wait and then read the first's watermark), gives the same rows. A missed
tick or a change of leader costs nothing: the watermark is in the database, and the next round
reads from it. What the rollup cannot see: a job deleted by retention before its minute was
rolled up (only if the retention is shorter than the grace plus the time the leader was away),
and a job finished by a transaction passed over above. Attempts that failed and will retry are not
finished jobs and are not counted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_django import defaults
from awa_django.sql import statements

__all__ = ["OpenTransaction", "OpenTransactionLog", "RollupBounds", "roll_up_history", "rollup_bounds"]

logger = logging.getLogger(__name__)

MINUTE = timedelta(minutes=1)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class OpenTransaction:
    """A transaction another session had open when a round read ``pg_stat_activity``."""

    pid: int
    xact_start: datetime
    state: str | None
    application_name: str
    user: str | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OpenTransaction:
        return cls(row["pid"], row["xact_start"], row["state"], row["application_name"], row["usename"])


@dataclass(frozen=True)
class RollupBounds:
    """One round's minutes, ``start <= minute < stop``; ``closed_through``: the new watermark;
    ``expired``: minutes before it leave the table; ``catching_up``: the round stopped short of
    the current minute (the next round should follow at once). From ``roll_up_history``:
    ``oldest_open``, the oldest transaction open in the database and younger than
    ``HISTORY_OPEN_TRANSACTION_MAX`` (the watermark stays at or before its start minute), or None;
    ``passed_over``, the oldest one open longer, which holds nothing, or None."""

    start: datetime
    stop: datetime
    closed_through: datetime
    expired: datetime
    catching_up: bool
    oldest_open: OpenTransaction | None = None
    passed_over: OpenTransaction | None = None


def rollup_bounds(
    closed_through: datetime | None,
    now: datetime,
    *,
    open_since: datetime | None = None,
    window_minutes: int = defaults.HISTORY_WINDOW_MINUTES,
    grace: float = defaults.HISTORY_GRACE,
    catch_up_minutes: int = defaults.HISTORY_CATCH_UP_MINUTES,
    open_max: float = defaults.HISTORY_OPEN_TRANSACTION_MAX,
) -> RollupBounds:
    """The minutes a round recomputes, given the watermark, the database's clock and the start of
    the oldest transaction open in the database (``open_since``, None: none).

    Never before the window (a watermark from a leader that was away a day starts over at the
    window), never past the current minute, at most ``catch_up_minutes`` at once; the watermark
    moves to the first minute that is not final yet (the module docstring's close rule: ended
    ``grace`` seconds ago, and not the minute of an open transaction's start or after it, unless
    that transaction is older than ``open_max`` seconds), and never backwards.
    """
    current = _minute(now)
    expired = current - (window_minutes - 1) * MINUTE
    start = expired if closed_through is None else max(_minute(closed_through), expired)
    start = min(start, current)
    stop = min(start + catch_up_minutes * MINUTE, current + MINUTE)
    final_before = _minute(now - timedelta(seconds=grace))  # a minute ended `grace` ago is final
    # An open transaction can still commit jobs stamped open_since; one older than open_max is
    # passed over (read_open_transactions: xact_start before now - open_max), as if it were not open.
    if open_since is not None and open_since >= now - timedelta(seconds=open_max):
        final_before = min(final_before, _minute(open_since))
    closed = max(min(final_before, stop), start)
    return RollupBounds(start, stop, closed, expired, catching_up=stop <= current)


async def roll_up_history(
    conn: psycopg.AsyncConnection[Any],
    now: datetime | None = None,
    *,
    top: int = defaults.HISTORY_TOP,
    open_max: float = defaults.HISTORY_OPEN_TRANSACTION_MAX,
) -> RollupBounds:
    """One rollup round on ``conn`` (autocommit: the round opens its own transaction). ``now``
    stands in for the database's clock (tests); returns the minutes it wrote, and the open
    transactions that held them or were passed over (``RollupBounds``)."""
    async with conn.transaction():
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["lock_history_mark"], {"now": now})
            mark = await cursor.fetchone()
            assert mark is not None  # the upsert always returns its row
            since = mark["now"] - timedelta(seconds=open_max)
            await cursor.execute(statements["read_open_transactions"], {"since": since})
            found = {row["passed_over"]: OpenTransaction.from_row(row) for row in await cursor.fetchall()}
        oldest_open, passed_over = found.get(False), found.get(True)
        bounds = rollup_bounds(
            mark["closed_through"],
            mark["now"],
            open_since=None if oldest_open is None else oldest_open.xact_start,
            open_max=open_max,
        )
        await conn.execute(statements["pin_history_reads"])
        await conn.execute(
            statements["delete_history_minutes"],
            {"start": bounds.start, "stop": bounds.stop, "expired": bounds.expired},
        )
        await conn.execute(statements["roll_up_history"], {"start": bounds.start, "stop": bounds.stop, "top": top})
        await conn.execute(statements["advance_history_mark"], {"closed_through": bounds.closed_through})
    return replace(bounds, oldest_open=oldest_open, passed_over=passed_over)


class OpenTransactionLog:
    """The leader's log of the rounds' open transactions: a warning, once per transaction, for one
    passed over (open longer than ``HISTORY_OPEN_TRANSACTION_MAX``: the history no longer waits
    for it, and a job it finishes is not counted), naming the session and how to end it; a debug
    line for one holding the watermark back."""

    def __init__(self) -> None:
        self._warned: tuple[int, datetime] | None = None

    def note(self, bounds: RollupBounds) -> None:
        stuck = bounds.passed_over
        if stuck is not None and (stuck.pid, stuck.xact_start) != self._warned:
            self._warned = (stuck.pid, stuck.xact_start)
            logger.warning(
                "history rollup: a transaction open since xact_start=%s (pid=%d state=%s application_name=%r "
                "user=%s) is older than HISTORY_OPEN_TRANSACTION_MAX (%.0f s); the history no longer waits for it, "
                "and a job it finishes will not be counted. End it (commit or roll back, or "
                "SELECT pg_terminate_backend(%d)) or set idle_in_transaction_session_timeout",
                stuck.xact_start.isoformat(),
                stuck.pid,
                stuck.state,
                stuck.application_name,
                stuck.user,
                defaults.HISTORY_OPEN_TRANSACTION_MAX,
                stuck.pid,
            )
        held = bounds.oldest_open
        if held is not None and _minute(held.xact_start) <= bounds.closed_through:
            logger.debug(
                "history rollup: minutes from %s held open by pid=%d (xact_start=%s state=%s application_name=%r)",
                bounds.closed_through.isoformat(),
                held.pid,
                held.xact_start.isoformat(),
                held.state,
                held.application_name,
            )
