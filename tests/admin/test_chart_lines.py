"""``build_lines``: every point lies in the plot area, a minute without a value breaks the line,
and the legend's latest value is the last minute that has one."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from awa_django.admin.charts import build_lines

START = datetime(2026, 1, 1, tzinfo=UTC)
values = st.lists(st.none() | st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300)


@given(values)
def test_build_lines__points_inside_the_plot_and_one_segment_per_run_of_values(series: list[float | None]) -> None:
    chart = build_lines([("p50", "p50", series)], START)
    [line] = chart.lines
    runs = sum(1 for i, v in enumerate(series) if v is not None and (i == 0 or series[i - 1] is None))
    assert len(line.segments) == runs
    points = [tuple(map(float, p.split(","))) for segment in line.segments for p in segment.split()]
    assert len(points) == sum(v is not None for v in series)
    for x, y in points:
        assert chart.plot_left <= x <= chart.plot_left + chart.plot_width + 1e-6
        assert chart.plot_top - 1e-6 <= y <= chart.plot_top + chart.plot_height + 1e-6
    latest = next((v for v in reversed(series) if v is not None), None)
    assert (line.last == "—") == (latest is None)


def test_build_lines__fixed_ceiling_and_percent_labels() -> None:
    chart = build_lines([("failure rate", "failed", [0.0, 50.0, None, 100.0])], START, unit="%", ceiling=100.0)
    assert [t.label for t in chart.y_ticks] == ["0%", "50%", "100%"]
    assert chart.lines[0].last == "100%"
    first, second = chart.lines[0].segments
    ys = [float(p.split(",")[1]) for p in (*first.split(), *second.split())]
    assert len(first.split()) == 2 and len(second.split()) == 1  # the empty minute breaks the line
    bottom = chart.plot_top + chart.plot_height
    assert ys == [bottom, bottom - chart.plot_height / 2, chart.plot_top]
