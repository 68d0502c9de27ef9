"""Read model of the console's history: the rows the maintenance leader's rollup wrote in
``awa_history`` (``awa_django.worker.history``), per kind or per queue, over the last hours.

Nothing here reads awa_job: a page costs one aggregate over the window's rows of one dimension
(at most minutes x (HISTORY_TOP + 1)) and the series of one name (at most one row per minute).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Min, Sum
from django.utils import timezone

from awa_django import defaults
from awa_django.models import HistoryDimension, HistoryMinute
from awa_django.services.db import database_alias
from awa_django.states import JobState

HOURS_CHOICES = (1, 6, 24)  # the windows the page offers; 24 is all there is


@dataclass(frozen=True)
class NameTotals:
    """One kind's (or queue's) totals over the window. ``name`` "" is every kind (or queue)
    beyond the busiest ``HISTORY_TOP`` of a minute."""

    name: str
    completed: int
    failed: int
    cancelled: int
    worst_wait_p95: float | None  # the highest minute's p95: a percentile of minutes cannot be merged
    worst_run_p95: float | None
    minutes: int  # from the name's first minute with a row in the window to now: the rate's span

    @property
    def finished(self) -> int:
        return self.completed + self.failed + self.cancelled

    @property
    def failure_rate(self) -> float | None:
        """failed / (completed + failed); None when neither happened."""
        ended = self.completed + self.failed
        return self.failed / ended if ended else None

    @property
    def per_minute(self) -> float:
        """Finished jobs per minute over the minutes since the name's first in the window: a queue
        that began an hour ago reads at its rate, not at that rate spread over the whole window."""
        return self.finished / self.minutes


@dataclass
class Series:
    """One name's per-minute values, oldest first, one entry per minute of the window (a minute
    with no row is 0 jobs and no durations)."""

    completed: list[int]
    failed: list[int]
    cancelled: list[int]
    wait_p50: list[float | None]
    wait_p95: list[float | None]
    run_p50: list[float | None]
    run_p95: list[float | None]

    @property
    def failure_rate(self) -> list[float | None]:
        return [f / (c + f) if c + f else None for c, f in zip(self.completed, self.failed, strict=True)]


@dataclass
class History:
    dimension: str
    start: datetime  # the window's first minute
    minutes: int
    totals: list[NameTotals] = field(default_factory=list)  # busiest first
    name: str | None = None  # whose series follows
    series: Series | None = None


def window_start(hours: int, now: datetime | None = None) -> datetime:
    """The first minute of the last ``hours`` (the current minute is the window's last)."""
    current = (now or timezone.now()).replace(second=0, microsecond=0)
    return current - timedelta(minutes=min(hours * 60, defaults.HISTORY_WINDOW_MINUTES) - 1)


def history(dimension: str, hours: int = 24, name: str | None = None, now: datetime | None = None) -> History:
    """Totals per name over the last ``hours``, and ``name``'s series (the busiest name's when
    None, none when the window is empty or ``name`` has no rows)."""
    if dimension not in HistoryDimension.values:
        raise ValueError(f"history dimension {dimension!r}: use one of {', '.join(HistoryDimension.values)}")
    start = window_start(hours, now)
    minutes = min(hours * 60, defaults.HISTORY_WINDOW_MINUTES)
    rows = HistoryMinute.objects.using(database_alias()).filter(dimension=dimension, minute__gte=start)
    # The count columns are named after the final states they count.
    ended = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)
    aggregates = (
        rows.order_by()
        .values("name")
        .annotate(
            **{f"n_{state}": Sum(state.value) for state in ended},
            wait=Max("wait_p95"),
            run=Max("run_p95"),
            first=Min("minute"),
        )
    )
    totals = []
    last = start + timedelta(minutes=minutes - 1)  # the current minute
    for aggregate in aggregates:
        values: dict[str, Any] = dict(aggregate)
        completed, failed, cancelled = (values[f"n_{state}"] or 0 for state in ended)
        span = int((last - values["first"]).total_seconds() // 60) + 1
        totals.append(
            NameTotals(
                values["name"],
                completed,
                failed,
                cancelled,
                values["wait"],
                values["run"],
                min(max(span, 1), minutes),
            )
        )
    totals.sort(key=lambda t: (-t.finished, t.name))
    found = History(dimension=dimension, start=start, minutes=minutes, totals=totals)
    if name is None and totals:
        name = totals[0].name
    if name is None or name not in {t.name for t in totals}:
        return found
    series = Series(
        completed=[0] * minutes,
        failed=[0] * minutes,
        cancelled=[0] * minutes,
        wait_p50=[None] * minutes,
        wait_p95=[None] * minutes,
        run_p50=[None] * minutes,
        run_p95=[None] * minutes,
    )
    for row in rows.filter(name=name):
        i = int((row.minute - start).total_seconds() // 60)
        if not 0 <= i < minutes:
            continue
        series.completed[i], series.failed[i], series.cancelled[i] = row.completed, row.failed, row.cancelled
        series.wait_p50[i], series.wait_p95[i] = row.wait_p50, row.wait_p95
        series.run_p50[i], series.run_p95[i] = row.run_p50, row.run_p95
    found.name, found.series = name, series
    return found
