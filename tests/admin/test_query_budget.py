"""The job list and the bulk preview run each statement within ``ADMIN_QUERY_TIMEOUT``: a search
over every state reads every unfinished job (no index covers their args), which on a big enough
backlog outlasts any page. Stopped, it is asked again of finished jobs only, with a message; any
other list stopped goes back to the plain list, naming what was stopped; never a server error.

The budget is lowered to a millisecond here, and the backlog (50,000 unfinished jobs, analysed) is
big enough that reading it takes far longer: the statement is really cancelled by the server."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from awa_django.admin.helpers import query_budget, stopped_by_budget
from awa_django.models import Job
from awa_django.states import JobState

BACKLOG = 50_000
TINY = {"ADMIN_QUERY_TIMEOUT": 0.001}


@pytest.fixture
def big_backlog(db: None) -> int:
    """BACKLOG available jobs and one completed job of user 5; returns the completed job's id."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa_job (kind, queue, args, state, priority, attempt, max_attempts, run_at, created_at,"
            " errors, metadata, tags, run_lease, fair_key)"
            " SELECT 'k', 'default', jsonb_build_object('user_id', g %% 1000 + 10), 'available', 1, 0, 25, now(),"
            " now(), '[]', '{}', '{}', 0, '' FROM generate_series(1, %s) AS g",
            [BACKLOG],
        )
        cursor.execute("ANALYZE awa_job")
    done = Job.objects.create(kind="k", args={"user_id": 5}, state=JobState.COMPLETED, finalized_at=timezone.now())
    return done.pk


@pytest.fixture
def admin_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def test_budget__a_statement_past_it_is_cancelled_by_the_server(big_backlog: int) -> None:
    with override_settings(AWA=TINY), pytest.raises(OperationalError) as raised, query_budget():
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM awa_job a, awa_job b WHERE a.args = b.args")
    assert stopped_by_budget(raised.value)
    with connection.cursor() as cursor:  # the setting was for that transaction only
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"


def test_every_state_search_stopped__asked_again_of_finished_jobs_with_a_message(
    admin_client: Client, big_backlog: int
) -> None:
    url = reverse("admin:awa_job_changelist") + "?q=user_id%3D5&every_state=1"
    with override_settings(AWA=TINY):
        response = admin_client.get(url)
    assert response.status_code == 302
    assert query_of(response["Location"]) == {"q": ["user_id=5"], "every_state": ["0"]}
    page = admin_client.get(response["Location"])  # the default budget again
    assert page.status_code == 200
    assert [job.pk for job in page.context["cl"].result_list] == [big_backlog]
    shown = [str(message) for message in page.context["messages"]]
    assert any("search over every state was stopped after 0.001 s" in text for text in shown), shown
    assert any("ADMIN_QUERY_TIMEOUT" in text for text in shown)


def test_filter_stopped__back_to_the_plain_list_naming_it(admin_client: Client, big_backlog: int) -> None:
    url = reverse("admin:awa_job_changelist") + "?kind=k&q=k"
    with override_settings(AWA=TINY):
        response = admin_client.get(url)
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:awa_job_changelist")
    page = admin_client.get(response["Location"])
    shown = [str(message) for message in page.context["messages"]]
    assert any("kind=k&q=k" in text and "was stopped after 0.001 s" in text for text in shown), shown


def test_bulk_preview_of_every_state_stopped__asked_again_of_finished_jobs(
    admin_client: Client, big_backlog: int
) -> None:
    url = reverse("admin:awa_job_bulk", args=["retry"]) + "?q=user_id%3D5&every_state=1"
    with override_settings(AWA=TINY):
        response = admin_client.get(url)
    assert response.status_code == 302
    assert query_of(response["Location"]) == {"q": ["user_id=5"], "every_state": ["0"]}
    assert urlsplit(response["Location"]).path == reverse("admin:awa_job_bulk", args=["retry"])


def test_within_the_budget__pages_unchanged(admin_client: Client, big_backlog: int) -> None:
    response = admin_client.get(reverse("admin:awa_job_changelist") + "?q=user_id%3D5&every_state=1")
    assert response.status_code == 200
    assert [job.pk for job in response.context["cl"].result_list] == [big_backlog]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(1e-9, "1ms"), (2.5, "2500ms"), (86_400 * 365, "2147483647ms"), (3e9, "2147483647ms")],
)
def test_any_valid_budget__postgres_takes_it(admin_client: Client, seconds: float, expected: str) -> None:
    """The setting accepts any finite number of seconds above 0; Postgres takes at most INT_MAX
    milliseconds and at least one: the budget is clamped to that, never refused by the server."""
    with override_settings(AWA={"ADMIN_QUERY_TIMEOUT": seconds}), query_budget() as budget:
        with connection.cursor() as cursor:
            cursor.execute("SHOW statement_timeout")
            shown = cursor.fetchone()[0]
    assert budget == seconds
    assert shown == expected
