"""The dashboard's throughput charts as SVG geometry: bars and ticks in pixels, no I/O.

The templates (``admin/awa/dashboard.html`` and ``_dashboard_body.html``) draw what ``build_chart``
returns; everything here is plain arithmetic on the per-minute counts, so it is tested without
a database or a browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from awa_django.states import JobState


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str
    title: str


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_left: int
    plot_top: int
    plot_width: int
    plot_height: int
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    completed: int
    failed: int
    peak: int


def nice_ceiling(value: int) -> int:
    """The top of a y axis for ``value``: at least 1, then 1, 2, 2.5 or 5 times a power of ten."""
    if value <= 4:
        return max(value, 1)
    magnitude = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return int(step * magnitude)
    return value


def build_chart(
    completed: Sequence[int],
    failed: Sequence[int],
    start: datetime,
    *,
    width: int = 960,
    height: int = 220,
    axes: bool = True,
) -> Chart:
    """Stacked bars (failed at the bottom, completed above) per minute, as SVG coordinates."""
    minutes = len(completed)
    left, top = (44, 10) if axes else (0, 2)
    bottom, right = (24, 24) if axes else (0, 0)
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [c + f for c, f in zip(completed, failed, strict=True)]
    peak = max(totals, default=0)
    ceiling = nice_ceiling(peak)
    slot = plot_w / max(minutes, 1)
    gap = min(2.0, slot * 0.2)
    bars: list[Bar] = []
    local_start = timezone.localtime(start)
    for i, (done, bad) in enumerate(zip(completed, failed, strict=True)):
        x = left + i * slot + gap / 2
        minute = (local_start + timedelta(minutes=i)).strftime("%H:%M")
        base = float(top + plot_h)
        for count, kind in ((bad, JobState.FAILED), (done, JobState.COMPLETED)):
            if not count:
                continue
            h = max(plot_h * count / ceiling, 1.0)
            base -= h
            bars.append(
                Bar(round(x, 2), round(base, 2), round(slot - gap, 2), round(h, 2), kind, f"{minute}: {count} {kind}")
            )
    y_ticks = [Tick(round(top + plot_h - plot_h * f, 2), str(int(ceiling * f))) for f in (0, 0.5, 1)] if axes else []
    if axes and ceiling % 2:
        y_ticks = [y_ticks[0], y_ticks[2]]
    x_ticks = []
    if axes:
        for i in range(0, minutes + 1, 10):
            label = (local_start + timedelta(minutes=i)).strftime("%H:%M")
            x_ticks.append(Tick(round(left + i * slot, 2), label))
    return Chart(width, height, left, top, plot_w, plot_h, bars, y_ticks, x_ticks, sum(completed), sum(failed), peak)
