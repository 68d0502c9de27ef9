"""The dashboard's chart geometry: axis ceilings and bars inside the plot, without a database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from awa_django.admin.charts import build_chart, nice_ceiling

START = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("peak", "ceiling"),
    [(0, 1), (1, 1), (4, 4), (5, 5), (7, 10), (11, 20), (21, 25), (26, 50), (51, 100), (101, 200), (2400, 2500)],
)
def test_nice_ceiling__table(peak: int, ceiling: int) -> None:
    assert nice_ceiling(peak) == ceiling


counts = st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000)), min_size=1, max_size=60)


@example([(1, 2489)], False)  # the stack that rises above the plot top
@example([(0, 125), (1, 5000)], True)  # a bar whose rounded y + height ends 0.01 below the plot
@given(counts, st.booleans())
def test_build_chart__bars_stay_in_the_plot_and_totals_add_up(pairs: list[tuple[int, int]], axes: bool) -> None:
    completed, failed = [c for c, _ in pairs], [f for _, f in pairs]
    chart = build_chart(completed, failed, START, axes=axes)

    assert (chart.completed, chart.failed, chart.peak) == (sum(completed), sum(failed), max(map(sum, pairs)))
    assert len(chart.bars) == sum(1 for c, f in pairs for n in (c, f) if n)
    bottom = chart.plot_top + chart.plot_height
    # Coordinates are rounded to 0.01 one by one, so an edge (y + height) may be off by 0.02. A
    # non-zero count is drawn at least 1px tall (so it shows), which can lift the top of a stack
    # of two up to 1px above the plot area (1 completed on 2489 failed under a 2500 axis).
    rounding = 0.02
    for bar in chart.bars:
        assert chart.plot_left <= bar.x and bar.x + bar.width <= chart.plot_left + chart.plot_width + rounding
        assert chart.plot_top - 1.0 - rounding <= bar.y and bar.y + bar.height <= bottom + rounding
        assert bar.kind in ("completed", "failed")
