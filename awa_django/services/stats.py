"""Read models of the queues: job counts by state, the oldest waiting job, throughput, and how
they are shown (``format_age``).

The counts use the ORM with each state in its own branch, compared to a literal, so that Postgres
can use the partial indexes on awa_job and never reads the completed and cancelled rows (the bulk
of a busy table); throughput reads finished rows by ``finalized_at`` through awa_job_finalized_idx.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import CharField, Count, Min, QuerySet, Value
from django.db.models.functions import Trunc
from django.utils import timezone

from awa_django.models import Job, JobState, Queue, WorkerInstance
from awa_django.services.cluster import QueueCapacity, capacities_by_queue, live_workers, mode_label
from awa_django.services.db import database_alias
from awa_django.sql import statements

# The states the queue overview counts: what is waiting, running, or needs attention.
COUNTED_STATES = (
    JobState.AVAILABLE,
    JobState.SCHEDULED,
    JobState.RETRYABLE,
    JobState.RUNNING,
    JobState.FAILED,
)


@dataclass
class QueueStats:
    """A queue's job counts by state and its live capacity, summed over the live workers."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    oldest_available_at: datetime | None = None
    paused: bool | None = None  # None: no Queue row
    has_row: bool = False
    capacities: list[QueueCapacity] = field(default_factory=list)

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

    @property
    def mode_labels(self) -> list[str]:
        """The live workers' modes as the pages say them (``mode_label``: scope included)."""
        return sorted({mode_label(c.mode, c.scope) for c in self.capacities})

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
            "capacity": [c.as_dict() for c in self.capacities],
        }


def _state_branch(state: str, queues: Sequence[str] | None) -> QuerySet[Any, Any]:
    """One state's counts per queue: ``state = '<literal>'`` lets the planner pick its partial index."""
    qs = Job.objects.using(database_alias()).filter(state=state)
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
        rows = list(Queue.objects.using(database_alias()).only("name", "paused"))
        counts = job_counts(None)
    else:
        rows = list(queues)
        counts = job_counts([q.name for q in rows])
    capacities = capacities_by_queue(workers)
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
        Job.objects.using(database_alias())
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
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["estimate_job_count"], {"table": Job._meta.db_table})
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] <= 0:
        return None
    return int(row[0])


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
