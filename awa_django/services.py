"""Operator actions and read models: what the admin, the dashboard and ``awa_health`` share.

Actions (``retry_jobs``, ``cancel_jobs``, ``discard_jobs``, ``pause_queues``, ``resume_queues``)
each take ids or names, change only the rows in a state the action applies to, and return how
many rows they changed. The admin's actions call exactly these functions; so can your code.

Locking contract of the job actions: the affected rows are locked with ``SELECT … FOR UPDATE``
(in id order) and re-checked against their state before they are changed, in one transaction.
A worker's finalising write is guarded by ``(id, state = 'running', run_lease)``, so once a
running job is cancelled or discarded here, the worker's late write matches nothing.

Read models (``queue_stats``, ``live_workers``, ``throughput``) use the ORM with the state written
as a literal, one branch per state, so that Postgres can use the partial indexes on awa_job.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import CharField, Count, F, Min, QuerySet, Value
from django.db.models.functions import Greatest, Least, Trunc
from django.utils import timezone

from awa_django.concurrency import Weighted
from awa_django.conf import awa_settings
from awa_django.defaults import MAX_ATTEMPTS_MAX
from awa_django.models import Job, JobState, Queue, Schedule, ScheduleSource, WorkerInstance
from awa_django.sql import CANCEL_CHANNEL, JOBS_CHANNEL, statements
from awa_django.worker.snapshot import QueueSnapshot, SnapshotFormatError

RETRYABLE_FROM = (JobState.FAILED, JobState.CANCELLED)
CANCELLABLE_FROM = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.RETRYABLE)
# The states the queue overview counts: what is waiting, running, or needs attention.
COUNTED_STATES = (
    JobState.AVAILABLE,
    JobState.SCHEDULED,
    JobState.RETRYABLE,
    JobState.RUNNING,
    JobState.FAILED,
)


def _alias() -> str:
    return awa_settings().DATABASE_ALIAS


def _ids(ids: Iterable[int | str]) -> list[int]:
    return sorted({int(i) for i in ids})


def _notify(sql: str, params: dict[str, Any]) -> None:
    with connections[_alias()].cursor() as cursor:
        cursor.execute(sql, params)


def _locked(ids: list[int], states: Sequence[str]) -> list[tuple[int, str, str]]:
    """Lock the rows among ``ids`` that are in ``states``, in id order; return (id, queue, state)."""
    return list(
        Job.objects.using(_alias())
        .select_for_update()
        .filter(pk__in=ids, state__in=list(states))
        .order_by("pk")
        .values_list("pk", "queue", "state")
    )


# --- job actions ------------------------------------------------------------------------


def retry_jobs(ids: Iterable[int | str]) -> int:
    """Failed or cancelled jobs become available now; return how many did.

    The attempt count is kept; ``max_attempts`` is raised to ``attempt + 1`` where the job had
    used them all, so it runs once more. A unique job whose key is now held by another job is
    left as it is (retrying it would break the uniqueness it asked for).
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    alias = _alias()
    with transaction.atomic(using=alias):
        rows = _locked(wanted, RETRYABLE_FROM)
        changed: list[tuple[int, str]] = []
        for start in range(0, len(rows), 1000):
            batch = rows[start : start + 1000]
            try:
                with transaction.atomic(using=alias):
                    _make_available([r[0] for r in batch])
                changed.extend((r[0], r[1]) for r in batch)
            except IntegrityError:  # a unique key is taken: retry one by one, skipping those
                for job_id, queue, _ in batch:
                    try:
                        with transaction.atomic(using=alias):
                            _make_available([job_id])
                        changed.append((job_id, queue))
                    except IntegrityError:
                        continue
        if changed:
            queues = sorted({queue for _, queue in changed})
            _notify(statements["notify_available_queues"], {"channel": JOBS_CHANNEL, "queues": queues})
    return len(changed)


def _make_available(ids: list[int]) -> int:
    return (
        Job.objects.using(_alias())
        .filter(pk__in=ids)
        .update(
            state=JobState.AVAILABLE,
            run_at=timezone.now(),
            finalized_at=None,
            heartbeat_at=None,
            deadline_at=None,
            max_attempts=Greatest(F("max_attempts"), Least(F("attempt") + 1, Value(MAX_ATTEMPTS_MAX))),
        )
    )


def cancel_jobs(ids: Iterable[int | str]) -> int:
    """Jobs not yet finished become cancelled; return how many did.

    For a running job the worker holding it is told through ``pg_notify('awa_cancel', id)``
    (delivered at commit) and sets its handler's ``context.cancelled``; whatever the handler
    does next, the row stays cancelled.
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    with transaction.atomic(using=_alias()):
        rows = _locked(wanted, CANCELLABLE_FROM)
        if not rows:
            return 0
        changed = (
            Job.objects.using(_alias())
            .filter(pk__in=[r[0] for r in rows])
            .update(state=JobState.CANCELLED, finalized_at=timezone.now(), heartbeat_at=None, deadline_at=None)
        )
        running = [r[0] for r in rows if r[2] == JobState.RUNNING]
        if running:
            _notify(statements["notify_cancelled_jobs"], {"channel": CANCEL_CHANNEL, "ids": running})
    return changed


def discard_jobs(ids: Iterable[int | str]) -> int:
    """Delete jobs, whatever their state; return how many were deleted.

    A running job's worker is told as for a cancel, so its handler stops early.
    """
    wanted = _ids(ids)
    if not wanted:
        return 0
    with transaction.atomic(using=_alias()):
        rows = _locked(wanted, [s.value for s in JobState])
        if not rows:
            return 0
        deleted, _ = Job.objects.using(_alias()).filter(pk__in=[r[0] for r in rows]).delete()
        running = [r[0] for r in rows if r[2] == JobState.RUNNING]
        if running:
            _notify(statements["notify_cancelled_jobs"], {"channel": CANCEL_CHANNEL, "ids": running})
    return int(deleted)


# --- queue actions ----------------------------------------------------------------------


def pause_queues(names: Iterable[str]) -> int:
    """Pause queues (workers stop claiming from them); return how many were not paused before.

    A name without a ``Queue`` row gets one, paused, with the default settings. Every write to
    awa_queue is announced to the running workers by a trigger, so they apply it at once.
    """
    wanted = sorted(set(names))
    if not wanted:
        return 0
    alias = _alias()
    with transaction.atomic(using=alias):
        changed = (
            Queue.objects.using(alias)
            .filter(name__in=wanted, paused=False)
            .update(paused=True, updated_at=timezone.now())
        )
        existing = set(Queue.objects.using(alias).filter(name__in=wanted).values_list("name", flat=True))
        missing = [Queue(name=name, paused=True) for name in wanted if name not in existing]
        created = Queue.objects.using(alias).bulk_create(missing, ignore_conflicts=True) if missing else []
    return changed + len(created)


def resume_queues(names: Iterable[str]) -> int:
    """Resume paused queues; return how many were paused before."""
    wanted = sorted(set(names))
    if not wanted:
        return 0
    return (
        Queue.objects.using(_alias())
        .filter(name__in=wanted, paused=True)
        .update(paused=False, updated_at=timezone.now())
    )


# --- read models --------------------------------------------------------------------------


def snapshot_interval() -> float:
    """Seconds between a worker's snapshot writes (``AwaSettings.snapshot_interval``)."""
    return awa_settings().snapshot_interval


def default_stale_after() -> float:
    """A worker whose snapshot is older than this many seconds is not live (``AwaSettings.worker_stale_after``)."""
    return awa_settings().worker_stale_after


def live_workers(stale_after: float | None = None, now: datetime | None = None) -> list[WorkerInstance]:
    """Worker snapshots written within ``stale_after`` seconds, newest first (one query)."""
    seconds = default_stale_after() if stale_after is None else stale_after
    cutoff = (now or timezone.now()) - timedelta(seconds=seconds)
    return list(WorkerInstance.objects.using(_alias()).filter(last_seen_at__gte=cutoff).order_by("-last_seen_at"))


def worker_healthy(worker: WorkerInstance) -> bool:
    """Live (the caller filtered on last_seen_at) and not shutting down."""
    flags = worker.flags if isinstance(worker.flags, dict) else {}
    return not flags.get("stopping", False)


@dataclass
class WorkerCapacity:
    """One live worker's view of one queue."""

    worker: str
    mode: str
    type: str  # HardReserved | Weighted
    max_workers: int | None = None
    min_workers: int | None = None
    weight: int | None = None
    overflow_held: int = 0
    in_flight: int = 0
    available: int = 0
    paused: bool = False

    @classmethod
    def from_snapshot(cls, worker: str, snapshot: QueueSnapshot) -> WorkerCapacity:
        capacity = snapshot.capacity
        common: dict[str, Any] = {
            "worker": worker,
            "mode": snapshot.mode,
            "type": type(capacity).__name__,
            "in_flight": snapshot.in_flight,
            "available": snapshot.available,
            "paused": snapshot.paused,
        }
        if isinstance(capacity, Weighted):
            return cls(
                **common,
                min_workers=capacity.min_workers,
                weight=capacity.weight,
                overflow_held=capacity.overflow_held,
            )
        return cls(**common, max_workers=capacity.max_workers)

    def describe(self) -> str:
        if self.type == "Weighted":
            return f"Weighted(min {self.min_workers}, weight {self.weight}, overflow held {self.overflow_held})"
        return f"HardReserved(max {self.max_workers})"


@dataclass
class QueueStats:
    """A queue's job counts by state and its live capacity, summed over the live workers."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_available_at: datetime | None = None
    paused: bool | None = None  # None: no Queue row
    has_row: bool = False
    capacities: list[WorkerCapacity] = field(default_factory=list)

    def count(self, state: str) -> int:
        return self.counts.get(state, 0)

    @property
    def available(self) -> int:
        return self.count(JobState.AVAILABLE)

    @property
    def scheduled(self) -> int:
        return self.count(JobState.SCHEDULED)

    @property
    def retryable(self) -> int:
        return self.count(JobState.RETRYABLE)

    @property
    def running(self) -> int:
        return self.count(JobState.RUNNING)

    @property
    def failed(self) -> int:
        return self.count(JobState.FAILED)

    @property
    def in_flight(self) -> int:
        return sum(c.in_flight for c in self.capacities)

    @property
    def overflow_held(self) -> int:
        return sum(c.overflow_held for c in self.capacities)

    @property
    def workers(self) -> int:
        """Live workers serving this queue (0: its jobs wait until one starts)."""
        return len(self.capacities)

    @property
    def waiting_without_worker(self) -> bool:
        """Jobs available to run, the queue not paused, and no live worker serves it."""
        return self.available > 0 and not self.paused and not self.capacities

    @property
    def modes(self) -> list[str]:
        return sorted({c.mode for c in self.capacities})

    def oldest_available_age(self, now: datetime | None = None) -> timedelta | None:
        if self.oldest_available_at is None:
            return None
        return max((now or timezone.now()) - self.oldest_available_at, timedelta(0))

    def as_dict(self, now: datetime | None = None) -> dict[str, Any]:
        age = self.oldest_available_age(now)
        return {
            "name": self.name,
            "paused": self.paused,
            "counts": {state: self.count(state) for state in COUNTED_STATES},
            "oldest_available_at": self.oldest_available_at.isoformat() if self.oldest_available_at else None,
            "oldest_available_age_seconds": round(age.total_seconds(), 3) if age is not None else None,
            "in_flight": self.in_flight,
            "overflow_held": self.overflow_held,
            "modes": self.modes,
            "workers": self.workers,
            "capacity": [c.__dict__ | {"describe": c.describe()} for c in self.capacities],
        }


def _state_branch(state: str, queues: Sequence[str] | None) -> QuerySet[Any, Any]:
    """One state's counts per queue: ``state = '<literal>'`` lets the planner pick its partial index."""
    qs = Job.objects.using(_alias()).filter(state=state)
    if queues is not None:
        qs = qs.filter(queue__in=list(queues))
    return (
        qs.order_by()
        .values("queue")
        .annotate(s=Value(state, output_field=CharField()), n=Count("*"), oldest=Min("run_at"))
        .values_list("queue", "s", "n", "oldest")
    )


def job_counts(queues: Sequence[str] | None = None) -> dict[str, tuple[dict[str, int], datetime | None]]:
    """``{queue: ({state: count}, oldest available run_at)}`` for COUNTED_STATES, in one query.

    ``queues=None`` covers every queue. One UNION ALL of per-state branches: available is an
    index-only scan of awa_job_available_idx; running, scheduled/retryable and failed use their
    partial indexes. Completed and cancelled rows (the bulk of a busy table) are never read.
    """
    if queues is not None and not queues:
        return {}
    first, *rest = (_state_branch(state, queues) for state in COUNTED_STATES)
    result: dict[str, tuple[dict[str, int], datetime | None]] = {}
    row: tuple[str, str, int, datetime | None]
    for row in first.union(*rest, all=True):
        queue, state, n, oldest = row
        counts, oldest_available = result.get(queue, ({}, None))
        counts[state] = n
        if state == JobState.AVAILABLE:
            oldest_available = oldest
        result[queue] = (counts, oldest_available)
    return result


def _capacities(workers: Sequence[WorkerInstance]) -> dict[str, list[WorkerCapacity]]:
    """{queue: each live worker's capacity for it}, read from the snapshot rows with the schema
    the worker writes them in (``awa_django.worker.snapshot``). An entry that does not follow it
    is left out and logged, naming the worker, the queue and what is wrong."""
    by_queue: dict[str, list[WorkerCapacity]] = {}
    for worker in workers:
        entries = worker.queues if isinstance(worker.queues, dict) else {}
        for queue, entry in entries.items():
            try:
                snapshot = QueueSnapshot.from_json(entry, f"worker {worker} queue {queue!r}")
            except SnapshotFormatError as exc:
                logger.warning(
                    "unreadable worker snapshot entry left out worker=%s queue=%s error=%s", worker, queue, exc
                )
                continue
            by_queue.setdefault(queue, []).append(WorkerCapacity.from_snapshot(str(worker), snapshot))
    return by_queue


def queue_stats(
    queues: Sequence[Queue] | None = None,
    workers: Sequence[WorkerInstance] | None = None,
) -> dict[str, QueueStats]:
    """Stats for the given Queue rows (a changelist page), or for every known queue.

    Every known queue: the Queue rows, the queues that have jobs in a counted state, and the
    queues a live worker serves. Queries: one for the counts, plus one each for the Queue rows
    and the live workers when they are not passed in.
    """
    if workers is None:
        workers = live_workers()
    if queues is None:
        rows = list(Queue.objects.using(_alias()).only("name", "paused"))
        counts = job_counts(None)
    else:
        rows = list(queues)
        counts = job_counts([q.name for q in rows])
    capacities = _capacities(workers)
    stats: dict[str, QueueStats] = {}
    for row in rows:
        stats[row.name] = QueueStats(row.name, paused=row.paused, has_row=True)
    if queues is None:
        for name in sorted(set(counts) | set(capacities)):
            stats.setdefault(name, QueueStats(name))
    for name, entry in stats.items():
        entry.counts, entry.oldest_available_at = counts.get(name, ({}, None))
        entry.capacities = capacities.get(name, [])
    return stats


@dataclass
class Throughput:
    """Jobs finalised per minute over a window: ``{queue: {state: [n per minute, oldest first]}}``."""

    start: datetime
    minutes: int
    series: dict[str, dict[str, list[int]]]

    def total(self, state: str) -> list[int]:
        out = [0] * self.minutes
        for per_state in self.series.values():
            for i, n in enumerate(per_state.get(state, [])):
                out[i] += n
        return out


def throughput(minutes: int = 60, now: datetime | None = None) -> Throughput:
    """Completed and failed jobs per minute and queue over the last ``minutes``, in one query.

    Uses awa_job_finalized_idx (state, finalized_at) for the range.
    """
    now = now or timezone.now()
    end = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    rows = (
        Job.objects.using(_alias())
        .filter(state__in=[JobState.COMPLETED, JobState.FAILED], finalized_at__gte=start, finalized_at__lt=end)
        .order_by()
        .annotate(minute=Trunc("finalized_at", "minute"))
        .values("queue", "state", "minute")
        .annotate(n=Count("*"))
        .values_list("queue", "state", "minute", "n")
    )
    series: dict[str, dict[str, list[int]]] = {}
    for queue, state, minute, n in rows:
        index = int((minute - start).total_seconds() // 60)
        if 0 <= index < minutes:
            per_state = series.setdefault(queue, {s: [0] * minutes for s in (JobState.COMPLETED, JobState.FAILED)})
            per_state[state][index] += n
    return Throughput(start=start, minutes=minutes, series=series)


def estimated_job_count() -> int | None:
    """The planner's estimate of awa_job's rows, or None when the table was never analysed."""
    with connections[_alias()].cursor() as cursor:
        cursor.execute(statements["estimate_job_count"], {"table": Job._meta.db_table})
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] <= 0:
        return None
    return int(row[0])


def global_maximums(workers: Sequence[WorkerInstance]) -> list[tuple[int, str]]:
    """The global maximums the Σ min_workers rule applies to: ``(value, where it comes from)``."""
    found: list[tuple[int, str]] = []
    configured = awa_settings().GLOBAL_MAX_WORKERS
    if isinstance(configured, int) and not isinstance(configured, bool) and configured >= 1:
        found.append((configured, "AWA['GLOBAL_MAX_WORKERS']"))
    for worker in workers:
        value = worker.global_max_workers
        if value is not None and all(value != v for v, _ in found):
            found.append((int(value), f"live worker {worker}"))
    return found


def format_age(age: timedelta | None) -> str:
    """``3s``, ``4m 05s``, ``2h 03m``, ``3d 4h``; ``—`` for none."""
    if age is None:
        return "—"
    seconds = max(math.floor(age.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


# --- schedules (periodic jobs) ----------------------------------------------------------
#
# Locking contract: every write here locks the Schedule rows it changes (SELECT … FOR UPDATE, in
# name order) in one transaction. The maintenance leader's fire_schedule.sql takes the same row
# lock and compares next_fire_at and last_fire_at with what it read, so a fire never uses a
# schedule that was paused, re-timed or removed after the leader read it: it simply does not
# fire, and the next round reads the new row.

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
)


def next_fire_after(schedule: Schedule, after: datetime | None = None, count: int = 1) -> list[datetime]:
    """The schedule's next ``count`` fire instants after ``after`` (default: now), in UTC.

    Raises InvalidScheduleError (naming the schedule) if its cron or time zone is invalid.
    """
    from awa_django.cron import parse

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
    from awa_django.registry import ScheduleSpec, registry

    declared: list[ScheduleSpec] = list(registry.schedules() if specs is None else specs)
    now = now or timezone.now()
    alias = _alias()
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
    alias = _alias()
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
    alias = _alias()
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
    alias = _alias()
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
    no unique key, so it never blocks a slot. Works for paused and removed schedules too."""
    wanted = sorted(set(names))
    alias = _alias()
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
                )
            )
    return jobs


def cluster_capacity() -> dict[str, Any]:
    """Capacity scope "cluster" at a glance: how many workers take part, the Cluster settings row's
    global maximum, the workers' own settings, and the value the leader applies (the smallest of
    them, so workers that disagree never together exceed any). Reads only; no locks."""
    from awa_django.models import ClusterSettings, WorkerCapacity

    row = ClusterSettings.objects.filter(pk=1).values_list("global_max_workers", flat=True).first()
    own = sorted({v for v in WorkerCapacity.objects.values_list("global_max_workers", flat=True) if v is not None})
    values = set(own) | ({row} if row is not None else set())
    return {
        "workers": WorkerCapacity.objects.count(),
        "setting": row,
        "worker_settings": own,
        "in_force": min(values) if values else None,
        "disagree": len(values) > 1,
    }
