"""Read models of the queues: job counts by state, the oldest waiting job, throughput, and how
they are shown (``format_age``).

The counts (``count_queue_jobs.sql``) read only the counted states' partial indexes, index-only, and
never the completed and cancelled rows (the bulk of a busy table); the console's pages bound them
per queue and state (``10000+``), so they cost the same on a table of any size. Throughput reads
the history rollup's per-queue minutes (awa_history) and only the last minute or two of finished
rows, by ``finalized_at`` (awa_job_done's partitions of those minutes, and the few finished rows
left hot, each through its finalized_at index).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, Q
from django.db.models.functions import Trunc
from django.utils import timezone

from awa_django.defaults import PRIORITY_MAX, PRIORITY_MIN
from awa_django.models import HistoryDimension, HistoryMark, HistoryMinute, Job, JobState, Queue, WorkerInstance
from awa_django.services.cluster import QueueCapacity, capacities_by_queue, live_workers, mode_label
from awa_django.services.db import database_alias
from awa_django.sql import statements

# Each (queue, state) count of the console's pages and of awa_health stops past this many rows
# ("10000+"): a count reads an index entry (and, for failed jobs, a row) per job, and failed jobs are
# kept for days, so an exact count grows with the history.
COUNT_LIMIT = 10_000

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
    limit: int | None = None  # the counts' bound (job_counts): a count above it means "more than limit"

    def count(self, state: str) -> int:
        return self.counts.get(state, 0)

    def capped(self, state: str) -> bool:
        """The count of ``state`` stopped at the bound: there are more than ``limit``."""
        return self.limit is not None and self.count(state) > self.limit

    def shown(self, state: str) -> str:
        """The count as the pages print it: ``1234``, or ``10000+`` past the bound."""
        if self.capped(state):
            return f"{self.limit}+"
        return str(self.count(state))

    @property
    def shown_counts(self) -> dict[str, str]:
        """``{state: shown(state)}`` for COUNTED_STATES (templates cannot pass arguments)."""
        return {state: self.shown(state) for state in COUNTED_STATES}

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
            "counts": {state: self.limit if self.capped(state) else self.count(state) for state in COUNTED_STATES},
            "counts_capped": [state for state in COUNTED_STATES if self.capped(state)],
            "count_limit": self.limit,
            "oldest_available_at": self.oldest_available_at.isoformat() if self.oldest_available_at else None,
            "oldest_available_age_seconds": round(age.total_seconds(), 3) if age is not None else None,
            "in_flight": self.in_flight,
            "overflow_held": self.overflow_held,
            "modes": self.modes,
            "workers": self.workers,
            "capacity": [c.as_dict() for c in self.capacities],
        }


def job_counts(
    queues: Sequence[str] | None = None, limit: int | None = None
) -> dict[str, tuple[dict[str, int], datetime | None]]:
    """``{queue: ({state: count}, oldest available run_at)}`` for COUNTED_STATES, in one query.

    ``queues=None`` covers every queue with jobs in those states. ``limit``: each (queue, state)
    count stops past it, a count above ``limit`` reads "more than ``limit``" (the console's pages;
    None counts exactly, as awa_health does). The statement (``count_queue_jobs.sql``) reads only
    the counted states' partial indexes, index-only, and the queues' names by a loose index scan:
    the rows it counts are the cost, never the completed and cancelled bulk of the table.
    """
    if queues is not None and not queues:
        return {}
    params = {
        "queues": None if queues is None else list(queues),
        "lim": None if limit is None else limit + 1,
        "pmin": PRIORITY_MIN,
        "pmax": PRIORITY_MAX,
    }
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["count_queue_jobs"], params)
        rows = cursor.fetchall()
    result: dict[str, tuple[dict[str, int], datetime | None]] = {}
    for queue, state, n, oldest in rows:
        counts, oldest_available = result.get(queue, ({}, None))
        if n:
            counts[state] = int(n)
        if state == JobState.AVAILABLE:
            oldest_available = oldest
        result[queue] = (counts, oldest_available)
    return result


def queue_stats(
    queues: Sequence[Queue] | None = None,
    workers: Sequence[WorkerInstance] | None = None,
    limit: int | None = None,
) -> dict[str, QueueStats]:
    """Stats for the given Queue rows (a changelist page), or for every known queue.

    Every known queue: the Queue rows, the queues that have jobs in a counted state, and the
    queues a live worker serves. Queries: one for the counts, plus one each for the Queue rows
    and the live workers when they are not passed in. ``limit``: the counts' bound (job_counts),
    None for exact counts.
    """
    if workers is None:
        workers = live_workers()
    if queues is None:
        rows = list(Queue.objects.using(database_alias()).only("name", "paused"))
        counts = job_counts(None, limit)
    else:
        rows = list(queues)
        counts = job_counts([q.name for q in rows], limit)
    capacities = capacities_by_queue(workers)
    stats: dict[str, QueueStats] = {}
    for row in rows:
        stats[row.name] = QueueStats(row.name, paused=row.paused, has_row=True)
    if queues is None:
        for name in sorted(set(counts) | set(capacities)):
            stats.setdefault(name, QueueStats(name))
    for name, entry in stats.items():
        entry.counts, entry.oldest_available_at = counts.get(name, ({}, None))
        entry.limit = limit
        entry.capacities = capacities.get(name, [])
    return stats


@dataclass
class Throughput:
    """Jobs finalised per minute over a window: ``{queue: {state: [n per minute, oldest first]}}``.

    ``closed_through``: the history rollup's watermark (None: it never ran, so only the minutes
    read live from awa_job are counted); ``live_from``: the first minute read from awa_job.
    """

    start: datetime
    minutes: int
    series: dict[str, dict[str, list[int]]]
    closed_through: datetime | None = None
    live_from: datetime | None = None

    def total(self, state: str) -> list[int]:
        out = [0] * self.minutes
        for per_state in self.series.values():
            for i, n in enumerate(per_state.get(state, [])):
                out[i] += n
        return out

    @property
    def rolled_up(self) -> bool:
        """The rollup has run at least once."""
        return self.closed_through is not None

    @property
    def behind(self) -> bool:
        """The rollup's watermark lags the live minutes: the minutes between are what its last round
        saw (a round runs every HISTORY_EVERY seconds while a maintenance leader is up)."""
        return self.closed_through is not None and self.live_from is not None and self.closed_through < self.live_from


# Minutes read from awa_job: the rollup's watermark trails the clock by its grace (more while a
# transaction holds minutes open: those minutes are what its last round wrote).
LIVE_MINUTES = 2


def throughput(minutes: int = 60, now: datetime | None = None) -> Throughput:
    """Completed and failed jobs per minute and queue over the last ``minutes``, in two queries.

    The minutes before the rollup's watermark (at most ``LIVE_MINUTES`` before the current one)
    come from awa_history's per-queue rows, including the shared ``""`` bucket of the queues beyond
    the busiest HISTORY_TOP of a minute (counted in the totals, not in a queue's own series); the
    rest, at most ``LIVE_MINUTES``, from the finished jobs by their finalized_at indexes (the
    partitions of awa_job_done holding those minutes, and awa_job's): a range of a minute or two,
    never the hour.
    """
    now = now or timezone.now()
    alias = database_alias()
    current = now.replace(second=0, microsecond=0)
    end = current + timedelta(minutes=1)
    start = end - timedelta(minutes=minutes)
    mark = HistoryMark.objects.using(alias).filter(pk=1).values_list("closed_through", flat=True).first()
    live_from = max(current - timedelta(minutes=LIVE_MINUTES - 1), min(mark or current, current), start)
    rolled = (
        HistoryMinute.objects.using(alias)
        .filter(dimension=HistoryDimension.QUEUE, minute__gte=start, minute__lt=live_from)
        .filter(Q(completed__gt=0) | Q(failed__gt=0))
        .order_by()
        .values_list("name", "minute", "completed", "failed")
    )
    live = (
        Job.objects.using(alias)
        .filter(state__in=[JobState.COMPLETED, JobState.FAILED], finalized_at__gte=live_from, finalized_at__lt=end)
        .order_by()
        .annotate(minute=Trunc("finalized_at", "minute"))
        .values("queue", "minute")
        .annotate(
            n_completed=Count("id", filter=Q(state=JobState.COMPLETED)),
            n_failed=Count("id", filter=Q(state=JobState.FAILED)),
        )
        .values_list("queue", "minute", "n_completed", "n_failed")
    )
    series: dict[str, dict[str, list[int]]] = {}
    for queue, minute, completed, failed in rolled.union(live, all=True):
        index = int((minute - start).total_seconds() // 60)
        if 0 <= index < minutes:
            per_state = series.setdefault(queue, {s: [0] * minutes for s in (JobState.COMPLETED, JobState.FAILED)})
            per_state[JobState.COMPLETED][index] += completed
            per_state[JobState.FAILED][index] += failed
    return Throughput(start=start, minutes=minutes, series=series, closed_through=mark, live_from=live_from)


def estimated_job_count() -> int | None:
    """The planner's estimate of every job's row, hot (awa_job) and finished (the partitions of
    awa_job_done, where it exists), or None when none of those tables was ever analysed."""
    with connections[database_alias()].cursor() as cursor:
        cursor.execute(statements["estimate_job_count"])
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
