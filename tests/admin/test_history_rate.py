"""The history page's "per minute": over the minutes from a row's first minute in the window to
now, not over the whole window, so a queue that began an hour ago (a new install) reads at its own
rate rather than as nearly idle."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django import defaults
from awa_django.models import HistoryMinute
from awa_django.services.history import HOURS_CHOICES, history

URL = "/admin/awa/job/history/"
NOW = datetime(2026, 12, 4, 20, 10, 17, tzinfo=UTC)


def minute(ago: int, now: datetime = NOW) -> datetime:
    return now.replace(second=0, microsecond=0) - timedelta(minutes=ago)


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    hours=st.sampled_from(HOURS_CHOICES),
    rows=st.dictionaries(
        st.integers(0, defaults.HISTORY_WINDOW_MINUTES + 60),  # minutes ago, some before the window
        st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 40)),
        min_size=1,
        max_size=12,
    ),
)
def test_per_minute__the_finished_jobs_over_the_minutes_since_the_first_in_the_window(
    hours: int, rows: dict[int, tuple[int, int, int]]
) -> None:
    HistoryMinute.objects.all().delete()
    HistoryMinute.objects.bulk_create(
        HistoryMinute(minute=minute(ago), dimension="queue", name="emails", completed=c, failed=f, cancelled=x)
        for ago, (c, f, x) in rows.items()
    )
    window = min(hours * 60, defaults.HISTORY_WINDOW_MINUTES)
    inside = {ago: counts for ago, counts in rows.items() if ago < window}

    found = history("queue", hours, now=NOW)

    if not inside:
        assert found.totals == []
        return
    [totals] = found.totals
    span = max(inside) + 1  # its first minute in the window up to the current one, both counted
    assert totals.minutes == span
    assert totals.per_minute == sum(sum(counts) for counts in inside.values()) / span


@pytest.mark.django_db
def test_per_minute__each_row_over_its_own_span() -> None:
    HistoryMinute.objects.bulk_create(
        [
            HistoryMinute(minute=minute(600), dimension="queue", name="emails", completed=60),
            HistoryMinute(minute=minute(9), dimension="queue", name="reports", completed=30),
            HistoryMinute(minute=minute(0), dimension="queue", name="reports", completed=30),
        ]
    )

    rates = {t.name: t.per_minute for t in history("queue", 24, now=NOW).totals}

    assert rates == {"emails": 60 / 601, "reports": 60 / 10}


@pytest.mark.django_db
def test_history_page__a_new_install_reads_at_its_rate_not_spread_over_the_day(admin_client: Client) -> None:
    # Sixty jobs finished five minutes ago, nothing before: the default 24 h page reads them over
    # the six minutes since (seven, when the clock turns a minute while the test runs), not over
    # 1,440 minutes.
    HistoryMinute.objects.create(minute=minute(5, timezone.now()), dimension="queue", name="emails", completed=60)

    html = admin_client.get(URL).content.decode()

    row = re.search(r'<tr data-name="emails".*?</tr>', html, re.S)
    assert row is not None
    cells = re.findall(r'<td class="num">([^<]*)</td>', row.group(0))
    assert cells[0] == "60" and cells[3] in {f"{60 / 6:.2f}", f"{60 / 7:.2f}"}
    assert "from its first in the window to now" in html
