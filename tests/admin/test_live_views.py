"""The admin's live JSON views (the dashboard's, the queue list's, Running now's): who may read
them. Staff with the view permission, as for the pages; the metrics token; anyone when
``METRICS_OPEN`` says so; nobody else."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.admin.conftest import client_for
from tests.factories import JobFactory, QueueFactory

pytestmark = pytest.mark.django_db

LIVE_VIEWS = ["admin:awa_dashboard_data", "admin:awa_queue_live", "admin:awa_job_running_data"]
READERS = ["superuser", "change_staff", "view_staff"]


@pytest.mark.parametrize("view", LIVE_VIEWS)
@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_live_json__matrix(users: dict[str, User | None], who: str, view: str) -> None:
    QueueFactory(name="emails")
    response = client_for(users[who]).get(reverse(view))
    if who in READERS:
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        assert "generated_at" in response.json()
    else:
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


@pytest.mark.parametrize("view", LIVE_VIEWS)
def test_live_json__staff_without_awa_permissions_refused(db: None, view: str) -> None:
    client = client_for(User.objects.create_user("other", password=None, is_staff=True))
    assert client.get(reverse(view)).status_code == 403


@pytest.mark.parametrize("view", LIVE_VIEWS)
def test_live_json__the_metrics_token_opens_them_and_a_wrong_one_does_not(settings: object, view: str) -> None:
    QueueFactory(name="emails")
    settings.AWA = {"METRICS_TOKEN": "t0ken-for-scrapers"}  # type: ignore[attr-defined]
    right = Client(headers={"Authorization": "Bearer t0ken-for-scrapers"}).get(reverse(view))
    wrong = Client(headers={"Authorization": "Bearer guess"}).get(reverse(view))
    none = Client().get(reverse(view))
    assert right.status_code == 200 and "generated_at" in right.json()
    assert wrong.status_code == none.status_code == 302  # the admin's login, as without a token


@pytest.mark.parametrize("view", LIVE_VIEWS)
def test_live_json__metrics_open_opens_them_to_anyone(settings: object, view: str) -> None:
    settings.AWA = {"METRICS_OPEN": True}  # type: ignore[attr-defined]
    assert Client().get(reverse(view)).status_code == 200


def test_queue_live__cells_are_the_list_s_columns_for_the_rows_of_its_query(users: dict[str, User | None]) -> None:
    QueueFactory(name="emails")
    QueueFactory(name="reports")
    for _ in range(3):
        JobFactory(queue="emails")
    JobFactory(queue="reports", state="failed")
    client = client_for(users["view_staff"])

    every = client.get(reverse("admin:awa_queue_live")).json()
    searched = client.get(reverse("admin:awa_queue_live") + "?q=rep").json()

    assert set(every["rows"]) == {"emails", "reports"}
    assert every["rows"]["emails"]["available"] == "3" and every["rows"]["reports"]["failed"] == "1"
    assert set(searched["rows"]) == {"reports"}
    page = client.get(reverse("admin:awa_queue_changelist") + "?q=rep").content.decode()
    assert 'data-awa-live data-url="/admin/awa/queue/live/?q=rep"' in page
    assert "awa/live.js" in page


def test_queue_live__odd_query_strings_never_500(users: dict[str, User | None]) -> None:
    client = client_for(users["superuser"])
    for query in ["?q=%00", "?p=999999", "?o=99", "?e=1", "?q=" + "x" * 5000]:
        assert client.get(reverse("admin:awa_queue_live") + query).status_code == 200, query
    for query, named in [("?paused__exact=maybe", "maybe"), ("?name__in=%00", "NUL")]:
        refused = client.get(reverse("admin:awa_queue_live") + query)
        assert refused.status_code == 400, query
        assert "the list's filter cannot be read" in refused.json()["error"] and named in refused.json()["error"]
        page = client.get(reverse("admin:awa_queue_changelist") + query)
        assert page.status_code == 302 and page["Location"].endswith("?e=1")  # the page, as Django does
