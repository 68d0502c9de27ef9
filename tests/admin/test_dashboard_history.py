"""The dashboard's last-hour chart: read from the history rollup plus awa_job's last minute or two,
its numbers are the ones the jobs' rows give (computed here from the rows, after a rollup round at
a fixed clock), and the page says when the rollup has not run or has stopped."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.admin.dashboard import history_note
from awa_django.models import HistoryMark, HistoryMinute, Job
from awa_django.services.stats import throughput
from awa_django.worker.history import roll_up_history
from tests.admin.conftest import client_for
from tests.conftest import connection_params
from tests.factories import JobFactory

JOB_TABLE = f'"{Job._meta.db_table}"'  # the quoted table (or view) the model reads

QUEUES = ("emails", "reports", "default")
STATES = ("completed", "failed", "cancelled")

# A finished job: (queue, state, seconds before the clock it was finalised at); up to 70 minutes
# back, so some fall before the chart's hour.
finished = st.tuples(st.sampled_from(QUEUES), st.sampled_from(STATES), st.integers(0, 70 * 60))


def roll_up_at(now: datetime) -> None:
    """Rollup rounds with ``now`` as the database's clock, until the rollup has caught up."""

    async def rounds() -> None:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            while (await roll_up_history(conn, now)).catching_up:
                pass

    asyncio.run(rounds())


def make_jobs(now: datetime, jobs: list[tuple[str, str, int]]) -> None:
    for queue, state, ago in jobs:
        JobFactory(queue=queue, state=state, attempt=1, finalized_at=now - timedelta(seconds=ago))


def expected_series(now: datetime, jobs: list[tuple[str, str, int]]) -> dict[str, dict[str, list[int]]]:
    """Per queue, completed and failed per minute of the hour ending with ``now``'s minute."""
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=59)
    out: dict[str, dict[str, list[int]]] = {}
    for queue, state, ago in jobs:
        index = int(((now - timedelta(seconds=ago)) - start).total_seconds() // 60)
        if state == "cancelled" or not 0 <= index < 60:
            continue
        out.setdefault(queue, {"completed": [0] * 60, "failed": [0] * 60})[state][index] += 1
    return out


def clear() -> None:
    Job.objects.all().delete()
    HistoryMinute.objects.all().delete()
    HistoryMark.objects.all().delete()


@pytest.mark.django_db(transaction=True)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(jobs=st.lists(finished, max_size=25), seconds=st.integers(0, 59), lag=st.integers(0, 20))
def test_throughput__after_a_rollup__is_what_the_rows_give(
    jobs: list[tuple[str, str, int]], seconds: int, lag: int
) -> None:
    clear()
    now = timezone.now().replace(second=seconds, microsecond=0)
    make_jobs(now, jobs)
    # The rollup round ran `lag` seconds before the page: the minutes since are read from awa_job.
    roll_up_at(now - timedelta(seconds=lag))
    flow = throughput(60, now=now)
    expected = expected_series(now, jobs)
    got = {q: s for q, s in flow.series.items() if any(s["completed"]) or any(s["failed"])}
    assert got == expected
    assert flow.rolled_up and not flow.behind
    assert history_note(flow) is None


@pytest.mark.django_db(transaction=True)
def test_throughput__reads_awa_job_only_for_the_last_minutes() -> None:
    now = timezone.now().replace(second=40, microsecond=0)
    make_jobs(now, [("emails", "completed", 30 * 60), ("emails", "failed", 5)])
    roll_up_at(now)
    with CaptureQueriesContext(connection) as captured:
        flow = throughput(60, now=now)
    sql = [q["sql"] for q in captured.captured_queries]
    assert len(sql) == 2 and sum(JOB_TABLE in s for s in sql) == 1
    assert flow.live_from == now.replace(second=0)  # 40 s past: the previous minute is final
    assert flow.total("completed")[29] == 1 and flow.total("failed")[59] == 1


@pytest.mark.django_db(transaction=True)
def test_dashboard__says_when_the_rollup_never_ran_and_counts_only_the_current_minute() -> None:
    now = timezone.now()
    make_jobs(now, [("emails", "completed", 0), ("emails", "completed", 20 * 60), ("reports", "failed", 0)])
    client = client_for(User.objects.create_superuser("root", password=None))
    page = client.get(reverse("admin:awa_dashboard"))
    assert "The history rollup has not run yet" in page.content.decode()
    data = client.get(reverse("admin:awa_dashboard_data")).json()
    assert data["history_note"].startswith("The history rollup has not run yet")
    # The current minute's two jobs (the page may have read a minute later: then none).
    assert data["last_hour"] in ({"completed": 1, "failed": 1}, {"completed": 0, "failed": 0})


@pytest.mark.django_db(transaction=True)
def test_dashboard__says_when_the_rollup_stopped() -> None:
    now = timezone.now()
    make_jobs(now, [("emails", "completed", 20 * 60)])
    roll_up_at(now - timedelta(minutes=10))
    client = client_for(User.objects.create_superuser("root", password=None))
    html = client.get(reverse("admin:awa_dashboard")).content.decode()
    assert "The history rollup has not closed a minute since" in html
    assert "A transaction open since then, for up to 10 minutes, also keeps them open" in html  # worker/history.py
    data = client.get(reverse("admin:awa_dashboard_data")).json()
    assert data["last_hour"]["completed"] == 1  # rolled up before the rollup stopped
