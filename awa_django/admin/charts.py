"""The console's charts as SVG geometry: bars, lines and ticks in pixels, no I/O.

The templates (``admin/awa/dashboard.html``, ``_dashboard_body.html``, ``job/history.html``) draw
what ``build_chart`` (stacked per-minute counts) and ``build_lines`` (per-minute values such as a
failure rate or a percentile) return; everything here is plain arithmetic on the per-minute
series, so it is tested without a database or a browser.
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
    tick_every: int = 10,
    minutes_per_bar: int = 1,
) -> Chart:
    """Stacked bars (failed at the bottom, completed above), one per ``minutes_per_bar`` minutes
    (x ticks every ``tick_every`` bars), as SVG coordinates."""
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
        minute = (local_start + timedelta(minutes=i * minutes_per_bar)).strftime("%H:%M")
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
        for i in range(0, minutes + 1, tick_every):
            label = (local_start + timedelta(minutes=i * minutes_per_bar)).strftime("%H:%M")
            x_ticks.append(Tick(round(left + i * slot, 2), label))
    return Chart(width, height, left, top, plot_w, plot_h, bars, y_ticks, x_ticks, sum(completed), sum(failed), peak)


@dataclass(frozen=True)
class Line:
    label: str
    css: str  # the class the stylesheet colours it by
    segments: list[str]  # SVG polyline points, one string per run of minutes that have a value
    last: str  # the latest value, as the legend shows it


@dataclass(frozen=True)
class LineChart:
    width: int
    height: int
    plot_left: int
    plot_top: int
    plot_width: int
    plot_height: int
    lines: list[Line]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    peak: float
    unit: str


def _format(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:.0f}%"
    return f"{value:.3g}{unit}"


def build_lines(
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    start: datetime,
    *,
    unit: str = "s",
    ceiling: float | None = None,
    width: int = 960,
    height: int = 160,
    tick_every: int = 60,
) -> LineChart:
    """Lines of per-minute values, ``(label, css class, values)`` each, sharing a y axis from 0 to
    ``ceiling`` (else a round number at or above the highest value). A minute without a value
    (None: no job in it) breaks the line instead of drawing it as 0."""
    left, top, bottom, right = 52, 10, 24, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    minutes = max((len(values) for _, _, values in series), default=0)
    peak = max((v for _, _, values in series for v in values if v is not None), default=0.0)
    if ceiling is None:
        ceiling = float(nice_ceiling(math.ceil(peak))) if peak >= 1 else (1.0 if peak > 0.1 or not peak else 0.1)
    slot = plot_w / max(minutes - 1, 1)
    lines = []
    for label, css, values in series:
        segments: list[str] = []
        points: list[str] = []
        for i, value in enumerate(values):
            if value is None:
                if points:
                    segments.append(" ".join(points))
                points = []
                continue
            y = top + plot_h - plot_h * min(value, ceiling) / ceiling
            points.append(f"{round(left + i * slot, 2)},{round(y, 2)}")
        if points:
            segments.append(" ".join(points))
        latest = next((v for v in reversed(values) if v is not None), None)
        lines.append(Line(label, css, segments, "—" if latest is None else _format(latest, unit)))
    y_ticks = [Tick(round(top + plot_h - plot_h * f, 2), _format(ceiling * f, unit)) for f in (0, 0.5, 1)]
    local_start = timezone.localtime(start)
    x_ticks = [
        Tick(round(left + i * slot, 2), (local_start + timedelta(minutes=i)).strftime("%H:%M"))
        for i in range(0, minutes, tick_every)
    ]
    return LineChart(width, height, left, top, plot_w, plot_h, lines, y_ticks, x_ticks, peak, unit)
