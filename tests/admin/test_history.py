"""The history page (``admin:awa_job_history``): its numbers are the ones the jobs' rows give
(computed here from the rows, after a rollup round), the permission matrix, and odd query values
(named on the page, never a 500)."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import Job
from awa_django.worker.history import RollupBounds, roll_up_history
from tests.admin.conftest import client_for
from tests.conftest import connection_params
from tests.factories import JobFactory
from tests.worker.test_history_rollup import percentile

URL = "/admin/awa/job/history/"


def roll_up() -> list[RollupBounds]:
    async def rounds() -> list[RollupBounds]:
        async with await psycopg.AsyncConnection.connect(**connection_params(), autocommit=True) as conn:
            done = [await roll_up_history(conn)]
            while done[-1].catching_up:
                done.append(await roll_up_history(conn))
            return done

    return asyncio.run(rounds())


def some_finished_jobs() -> list[Job]:
    now = timezone.now()
    jobs: list[Job] = []
    for i in range(40):
        state = ("completed", "completed", "failed", "cancelled")[i % 4]
        finalized = now - timedelta(minutes=i * 7 % 50, seconds=i % 3)
        attempted = finalized - timedelta(seconds=0.5 + i % 5)
        jobs.append(
            JobFactory(
                kind=("mail.send", "report.build", "sms.send")[i % 3],
                queue=("emails", "reports")[i % 2],
                state=state,
                attempt=1,
                run_at=attempted - timedelta(seconds=i % 7),
                attempted_at=attempted,
                finalized_at=finalized,
            )
        )
    JobFactory(kind="mail.send", queue="emails", state="completed", finalized_at=now - timedelta(hours=30))  # too old
    return jobs


def totals_on(page: Any) -> dict[str, dict[str, int]]:
    rows = re.findall(
        r'<tr data-name="([^"]*)" data-completed="(\d+)" data-failed="(\d+)" data-cancelled="(\d+)"',
        page.content.decode(),
    )
    return {name: {"completed": int(c), "failed": int(f), "cancelled": int(x)} for name, c, f, x in rows}


def totals_from_rows(jobs: list[Job], field: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for job in jobs:
        entry = out.setdefault(getattr(job, field), {"completed": 0, "failed": 0, "cancelled": 0})
        entry[job.state] += 1
    return out


@pytest.fixture
def admin_client(transactional_db: None) -> Client:
    return client_for(User.objects.create_superuser("root", password=None))


def test_history_page__totals_per_queue_and_per_kind_match_the_jobs_rows(admin_client: Client) -> None:
    jobs = some_finished_jobs()
    roll_up()

    by_queue = admin_client.get(URL)
    by_kind = admin_client.get(URL, {"by": "kind", "hours": "1"})

    assert by_queue.status_code == by_kind.status_code == 200
    assert totals_on(by_queue) == totals_from_rows(jobs, "queue")
    assert totals_on(by_kind) == totals_from_rows(jobs, "kind")
    assert b'id="awa-history-ignored"' not in by_queue.content


def test_history_page__the_chosen_names_charts_show_its_minutes(admin_client: Client) -> None:
    jobs = some_finished_jobs()
    roll_up()

    page = admin_client.get(URL, {"by": "queue", "hours": "1", "name": "reports"})

    mine = [j for j in jobs if j.queue == "reports"]
    chart = page.context["awa_charts"]["throughput"]
    assert (chart.completed, chart.failed) == (
        sum(j.state == "completed" for j in mine),
        sum(j.state == "failed" for j in mine),
    )
    whole_day = admin_client.get(URL, {"by": "queue", "name": "reports"}).context["awa_charts"]["throughput"]
    assert len(whole_day.bars) <= 2 * 240  # six minutes a bar
    assert (whole_day.completed, whole_day.failed) == (chart.completed, chart.failed)
    html = page.content.decode()
    assert f"{chart.completed} completed, {chart.failed} failed" in html
    # The latest minute with a job: its run p95 is the legend's "latest" value.
    latest = max(j.finalized_at.replace(second=0, microsecond=0) for j in mine if j.finalized_at)
    runs = [
        (j.finalized_at - j.attempted_at).total_seconds()
        for j in mine
        if j.finalized_at and j.attempted_at and j.finalized_at.replace(second=0, microsecond=0) == latest
    ]
    expected = percentile(runs, 0.95)
    assert expected is not None
    assert f"latest {expected:.3g}s" in html
    assert 'class="awa-line awa-line-rate"' in html and 'class="awa-line awa-line-p95"' in html


def test_history_page__dashboard_links_to_it_and_an_empty_window_says_so(admin_client: Client) -> None:
    dashboard = admin_client.get(reverse("admin:awa_dashboard"))
    assert f'href="{URL}" id="awa-history-link"'.encode() in dashboard.content

    empty = admin_client.get(URL)
    assert b"No job finished in the last 24 h." in empty.content
    assert b"no round has run yet" in empty.content


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_history_page__matrix(users: dict[str, User | None], who: str) -> None:
    page = client_for(users[who]).get(URL)
    if who in ("superuser", "change_staff", "view_staff"):
        assert page.status_code == 200
    else:
        assert page.status_code == 302 and page["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_history_page__staff_who_may_view_queues_but_not_jobs_is_refused() -> None:
    user = User.objects.create_user("queues-only", password=None, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="awa", codename="view_queue"))
    assert client_for(user).get(URL).status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"by": "worker"}, "by='worker'"),
        ({"hours": "²"}, "hours='²'"),
        ({"hours": "48"}, "hours='48'"),
        ({"hours": "-1"}, "hours='-1'"),
        ({"hours": ""}, "hours=''"),
        ({"hours": "1" * 5000}, "hours='11111"),  # int() refuses past 4,300 digits: a 500 once
        ({"hours": "9" * 30}, "hours='99999"),
        ({"name": "a\x00b"}, "name="),
        ({"name": "x" * 300}, "name="),
    ],
)
def test_history_page__odd_values_are_named_and_the_default_used(
    users: dict[str, User | None], query: dict[str, str], named: str
) -> None:
    page = client_for(users["superuser"]).get(URL, query)
    assert page.status_code == 200
    assert page.context["awa_ignored"] and page.context["awa_ignored"][0].startswith(named)


def test_history_page__a_name_with_no_rows_says_so(admin_client: Client) -> None:
    JobFactory(kind="k", queue="emails", state="completed", finalized_at=timezone.now())
    roll_up()

    page = admin_client.get(URL, {"name": "nobody"})

    assert page.status_code == 200 and "awa_charts" not in page.context
    assert set(totals_on(page)) == {"emails"}
    assert "No queue named “nobody” finished a job in the last 24 h." in page.content.decode()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.dictionaries(st.sampled_from(["by", "hours", "name", "x"]), st.text(max_size=40), max_size=4))
def test_history_page__any_query__never_a_500(admin_client: Client, query: dict[str, str]) -> None:
    response = admin_client.get(URL, query)
    assert response.status_code == 200
