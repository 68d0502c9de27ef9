"""Periodic jobs: the maintenance leader fires each due schedule slot exactly once.

The leader reads the due schedules with the database's clock, computes each one's slots in
Python (``awa_django.cron``: croniter and the time-zone rule), then runs fire_schedule.sql, which
inserts the slots' jobs and advances the schedule in one statement guarded by a compare-and-swap
on the fire times it read. Two leaders (a failover, a split brain) computing the same slots
cannot both win: see the locking contract in fire_schedule.sql.

Missed slots (no leader was running): ``coalesce`` fires one job for the latest of them,
``catch_up`` fires each, the latest ``catch_up_limit`` at most; older ones are skipped and logged.

The fired jobs' fairness key is the schedule's own ``fair_key``, else what the kind's
``@job(fair_key=)`` derives from the schedule's args (``schedule_key``), else the default key.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.rows import dict_row

from awa_django.cron import CATCH_UP, parse
from awa_django.exceptions import InvalidJobError, InvalidScheduleError
from awa_django.jobspec import derive_fair_key
from awa_django.registry import Registry, registry
from awa_django.sql import statements

logger = logging.getLogger(__name__)

BATCH = 100  # schedules read per round


def schedule_unique_key(name: str, fire_at: datetime) -> str:
    """The unique_key of the job of ``name``'s slot ``fire_at``: one job per slot, ever."""
    stamp = fire_at.astimezone(timezone.utc).isoformat()
    return hashlib.sha256(f"schedule\x00{name}\x00{stamp}".encode()).hexdigest()


@dataclass(frozen=True)
class FirePlan:
    """What one fire does: the slots to insert jobs for, and the schedule's new fire times."""

    slots: list[datetime]
    last_fire_at: datetime | None
    next_fire_at: datetime
    skipped: bool  # older missed slots were left out (coalesce, or beyond catch_up_limit)


def plan_fire(
    name: str, cron: str, tz: str, missed: str, catch_up_limit: int, next_fire_at: datetime | None, now: datetime
) -> FirePlan:
    """The slots due from ``next_fire_at`` to ``now`` under the schedule's missed-fire policy
    (none, and the first fire after now, for a row that has no next fire time yet)."""
    spec = parse(cron, tz, name=name)
    if next_fire_at is None:
        return FirePlan([], None, spec.next_after(now), False)
    limit = catch_up_limit if missed == CATCH_UP else 1
    slots, following, skipped = spec.due(next_fire_at, now, limit)
    return FirePlan(slots, slots[-1] if slots else None, following, skipped)


def schedule_key(kind: str, args: Any, handlers: Registry = registry) -> str:
    """The key the kind's ``@job(fair_key=)`` derives from a schedule's args ('' for a kind without
    a rule, or not registered here). InvalidJobError naming the kind if the rule fails."""
    handler = handlers.registered(kind)
    rule = handler.fair_key if handler is not None else None
    return derive_fair_key(kind, rule, args if isinstance(args, dict) else {})


def fire_params(
    schedule_id: int,
    name: str,
    expected_last: datetime | None,
    expected_next: datetime | None,
    plan: FirePlan,
    derived_key: str = "",
) -> dict[str, Any]:
    return {
        "derived_key": derived_key,
        "id": schedule_id,
        "expected_last_fire_at": expected_last,
        "expected_next_fire_at": expected_next,
        "fire_ats": plan.slots,
        "fire_at_texts": [slot.astimezone(timezone.utc).isoformat() for slot in plan.slots],
        "unique_keys": [schedule_unique_key(name, slot) for slot in plan.slots],
        "last_fire_at": plan.last_fire_at or expected_last,
        "next_fire_at": plan.next_fire_at,
    }


class Scheduler:
    """The leader's schedule duty; owns no connection (the maintenance leader lends its own)."""

    def __init__(self, handlers: Registry = registry) -> None:
        # Rows found invalid (awa.E009), by id, with the cron and zone that were: logged once, and
        # left out of what is due until an operator changes either (or they would stay due for
        # ever: the leader would go round every MIN_SLEEP, and a batch of them hide valid rows).
        self._unfireable: dict[int, tuple[str, str]] = {}
        self._handlers = handlers

    def _skip_params(self) -> dict[str, list[Any]]:
        ids = sorted(self._unfireable)
        return {
            "skip_ids": ids,
            "skip_crons": [self._unfireable[i][0] for i in ids],
            "skip_zones": [self._unfireable[i][1] for i in ids],
        }

    async def fire_due(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Fire every due schedule slot; return how many jobs were inserted."""
        async with conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(statements["read_due_schedules"], {"limit": BATCH, **self._skip_params()})
            due = await cursor.fetchall()
        inserted = 0
        for row in due:
            schedule_id, name, cron, tz = row["id"], row["name"], row["cron"], row["timezone"]
            missed, limit, now = row["missed"], row["catch_up_limit"], row["db_now"]
            next_fire_at, last_fire_at = row["next_fire_at"], row["last_fire_at"]
            try:
                plan = plan_fire(name, cron, tz, missed, limit, next_fire_at, now)
            except InvalidScheduleError as exc:
                self._unfireable[schedule_id] = (cron, tz)
                logger.error("schedule not fired: %s; fix it in the Schedule admin schedule=%s", exc, name)
                continue
            self._unfireable.pop(schedule_id, None)
            derived_key = ""
            if plan.slots and not row["fair_key"]:
                try:
                    derived_key = schedule_key(row["kind"], row["args"], self._handlers)
                except InvalidJobError as exc:
                    # The slot still fires (nothing is lost), on the default key; the rule needs fixing.
                    logger.error(
                        "schedule fired on the default fairness key: %s; fix the kind's fair_key rule or set the "
                        "schedule's fair_key schedule=%s",
                        exc,
                        name,
                    )
            async with conn.cursor(row_factory=dict_row) as cursor:
                await cursor.execute(
                    statements["fire_schedule"],
                    fire_params(schedule_id, name, last_fire_at, next_fire_at, plan, derived_key),
                )
                fired = await cursor.fetchone()
            advanced, job_ids = (fired["advanced"], fired["job_ids"]) if fired else (0, [])
            inserted += len(job_ids)
            if not advanced:
                logger.info("schedule changed or fired by another leader; not fired schedule=%s", name)
                continue
            if plan.skipped:
                logger.warning(
                    "schedule missed slots that were not fired schedule=%s missed=%s fired=%d first_fired=%s",
                    name,
                    missed,
                    len(plan.slots),
                    plan.slots[0].isoformat() if plan.slots else None,
                )
            logger.debug(
                "schedule fired schedule=%s slots=%s job_ids=%s next_fire_at=%s",
                name,
                [s.isoformat() for s in plan.slots],
                job_ids,
                plan.next_fire_at.isoformat(),
            )
        return inserted

    async def seconds_until_due(self, conn: psycopg.AsyncConnection[Any]) -> float | None:
        """Seconds until the earliest active schedule is due (0 or less: now), None if none is."""
        cursor = await conn.execute(statements["next_schedule_fire"], self._skip_params())
        row = await cursor.fetchone()
        return None if row is None or row[0] is None else float(row[0])
