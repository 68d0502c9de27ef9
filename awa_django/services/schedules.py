"""Schedules (periodic jobs): declared in code and synced, edited, paused, resumed and run now
by operators.

Locking contract: every write here locks the Schedule rows it changes (SELECT … FOR UPDATE, in
name order) in one transaction. The maintenance leader's fire_schedule.sql takes the same row
lock and compares next_fire_at and last_fire_at with what it read, so a fire never uses a
schedule that was paused, re-timed or removed after the leader read it: it simply does not
fire, and the next round reads the new row.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from awa_django.cron import parse
from awa_django.models import Job, Schedule, ScheduleSource
from awa_django.schedules import ScheduleSpec, schedules
from awa_django.services.db import database_alias

logger = logging.getLogger(__name__)

SCHEDULE_CODE_FIELDS = (
    "kind",
    "cron",
    "timezone",
    "args",
    "queue",
    "priority",
    "max_attempts",
    "missed",
    "catch_up_limit",
    "fair_key",
)


def next_fire_after(schedule: Schedule, after: datetime | None = None, count: int = 1) -> list[datetime]:
    """The schedule's next ``count`` fire instants after ``after`` (default: now), in UTC.

    Raises InvalidScheduleError (naming the schedule) if its cron or time zone is invalid.
    """
    spec = parse(schedule.cron, schedule.timezone, name=schedule.name)
    moment = after or timezone.now()
    times: list[datetime] = []
    for _ in range(count):
        moment = spec.next_after(moment)
        times.append(moment)
    return times


@dataclass
class ScheduleSync:
    """What ``sync_schedules`` changed, by schedule name."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


# pg_advisory_xact_lock key for sync_schedules: "awa!" and "sync" as two int32s.
SYNC_SCHEDULES_LOCK = (0x61776121, 0x73796E63)


def sync_schedules(specs: Sequence[Any] | None = None, now: datetime | None = None) -> ScheduleSync:
    """Make the Schedule rows match the schedules declared in code (default: the registry's).

    Additive: a declared schedule is created or its code-owned fields updated (a changed cron or
    time zone restarts its next fire from now; paused stays as operators left it). A schedule
    declared in code before and not any more is disabled (``removed_from_code_at``), never
    deleted; declaring it again re-enables it from now. Admin-created schedules are left alone,
    unless code declares one of the same name, which then becomes code's.
    """
    declared: list[ScheduleSpec] = list(schedules if specs is None else specs)
    now = now or timezone.now()
    alias = database_alias()
    result = ScheduleSync()
    with transaction.atomic(using=alias):
        # Workers starting together all sync: one at a time (a transaction-level lock, so it is
        # released at commit, also behind a transaction pooler), or two would insert the same
        # new schedule and the second would fail on the unique name.
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", SYNC_SCHEDULES_LOCK)
        names = sorted({spec.name for spec in declared})
        rows = {
            row.name: row
            for row in Schedule.objects.using(alias).select_for_update().filter(name__in=names).order_by("name")
        }
        for spec in sorted(declared, key=lambda s: s.name):
            row = rows.get(spec.name)
            values = {name: getattr(spec, name) for name in SCHEDULE_CODE_FIELDS}
            if row is None:
                row = Schedule(name=spec.name, source=ScheduleSource.CODE, paused=spec.paused, **values)
                row.next_fire_at = next_fire_after(row, now)[0]
                row.save(using=alias)
                result.created.append(spec.name)
                continue
            changed = [name for name, value in values.items() if getattr(row, name) != value]
            retime = "cron" in changed or "timezone" in changed or row.removed_from_code_at is not None
            if not changed and not retime and row.source == ScheduleSource.CODE:
                continue
            if row.source != ScheduleSource.CODE:
                logger.warning(
                    "schedule created in the admin is now declared in code, which owns it schedule=%s", row.name
                )
            for name, value in values.items():
                setattr(row, name, value)
            row.source = ScheduleSource.CODE
            row.removed_from_code_at = None
            if retime:
                row.next_fire_at = next_fire_after(row, now)[0]
            row.save(using=alias)
            result.updated.append(spec.name)
        gone = (
            Schedule.objects.using(alias)
            .select_for_update()
            .filter(source=ScheduleSource.CODE, removed_from_code_at__isnull=True)
            .exclude(name__in=names)
            .order_by("name")
        )
        result.removed = list(gone.values_list("name", flat=True))
        if result.removed:
            Schedule.objects.using(alias).filter(name__in=result.removed).update(
                removed_from_code_at=now, updated_at=now
            )
            logger.warning(
                "schedules no longer declared in code are disabled (delete them in the admin if they are "
                "not coming back) schedules=%s",
                result.removed,
            )
    return result


SCHEDULE_RETIME_FIELDS = ("cron", "timezone")


def save_schedule(schedule: Schedule, changed: Sequence[str] | None = None, now: datetime | None = None) -> Schedule:
    """Save a schedule edited by an operator (the admin form): a new one, or only the ``changed``
    fields of an existing one, so a fire the leader committed meanwhile (last/next fire time,
    last job) is never overwritten. A new schedule, a changed cron or time zone, or a resume
    sets the next fire to the first slot after now. Raises InvalidScheduleError if its cron or
    time zone is invalid.
    """
    alias = database_alias()
    now = now or timezone.now()
    with transaction.atomic(using=alias):
        if schedule.pk is None or changed is None:
            schedule.next_fire_at = next_fire_after(schedule, now)[0]
            schedule.save(using=alias)
            return schedule
        Schedule.objects.using(alias).select_for_update().filter(pk=schedule.pk).first()
        fields = [name for name in changed if name not in ("next_fire_at", "last_fire_at", "last_job_id")]
        if any(name in fields for name in SCHEDULE_RETIME_FIELDS) or ("paused" in fields and not schedule.paused):
            schedule.next_fire_at = next_fire_after(schedule, now)[0]
            fields.append("next_fire_at")
        if fields:
            schedule.save(using=alias, update_fields=[*fields, "updated_at"])
    return schedule


def pause_schedules(names: Iterable[str]) -> int:
    """Pause schedules (no slot fires until resumed); return how many were running before."""
    wanted = sorted(set(names))
    if not wanted:
        return 0
    alias = database_alias()
    with transaction.atomic(using=alias):
        ids = list(
            Schedule.objects.using(alias)
            .select_for_update()
            .filter(name__in=wanted, paused=False)
            .order_by("name")
            .values_list("pk", flat=True)
        )
        return Schedule.objects.using(alias).filter(pk__in=ids).update(paused=True, updated_at=timezone.now())


def resume_schedules(names: Iterable[str], now: datetime | None = None) -> int:
    """Resume paused schedules; return how many were paused before.

    The next fire is the first slot after now: slots that passed while paused do not fire (that
    is what pausing means), whatever the missed-fire policy.
    """
    wanted = sorted(set(names))
    if not wanted:
        return 0
    alias = database_alias()
    now = now or timezone.now()
    with transaction.atomic(using=alias):
        rows = list(
            Schedule.objects.using(alias).select_for_update().filter(name__in=wanted, paused=True).order_by("name")
        )
        for row in rows:
            row.paused = False
            row.next_fire_at = next_fire_after(row, now)[0]
            row.save(using=alias, update_fields=["paused", "next_fire_at", "updated_at"])
    return len(rows)


def run_schedules_now(names: Iterable[str]) -> list[Job]:
    """Enqueue one job for each schedule now, as its next slot would, without moving the
    schedule (its next and last fire times stay). The job's metadata says ``run_now``; it has
    no unique key, so it never blocks a slot. Works for paused and removed schedules too. Its
    fairness key is the schedule's, else the kind's derived key, as when the schedule fires."""
    wanted = sorted(set(names))
    alias = database_alias()
    jobs: list[Job] = []
    with transaction.atomic(using=alias):
        for row in Schedule.objects.using(alias).filter(name__in=wanted).order_by("name"):
            jobs.append(
                Job.objects.db_manager(alias).enqueue(
                    row.kind,
                    row.args,
                    queue=row.queue,
                    priority=row.priority,
                    max_attempts=row.max_attempts,
                    metadata={"schedule": row.name, "fire_at": timezone.now().isoformat(), "run_now": True},
                    fair_key=row.fair_key or None,
                )
            )
    return jobs
