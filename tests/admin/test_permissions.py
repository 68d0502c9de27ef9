"""Who may do what: superuser and change-permission staff edit and act; view-only staff see
everything and change nothing; non-staff and anonymous users are sent to the login page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone

from awa_django.models import Job, Queue
from tests.admin.conftest import client_for
from tests.factories import JobFactory, QueueFactory

pytestmark = pytest.mark.django_db

EDITORS = ["superuser", "change_staff"]
LOGIN = "/admin/login/"


def queue_post(queue: Queue, **changes: Any) -> dict[str, Any]:
    data = {
        "name": queue.name, "max_workers": queue.max_workers, "min_workers": queue.min_workers,
        "weight": queue.weight, "rate_limit": "", "rate_burst": queue.rate_burst, "deadline": "",
        "priority_aging": "",
    }  # fmt: skip
    data.update(changes)
    return data


def is_login_redirect(response: Any) -> bool:
    return response.status_code == 302 and response["Location"].startswith(LOGIN)


@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_queue_change_page__matrix(users: dict[str, User | None], who: str) -> None:
    queue = QueueFactory(name="emails", weight=1)
    client = client_for(users[who])
    url = reverse("admin:awa_queue_change", args=[queue.pk])

    page = client.get(url)
    saved = client.post(url, queue_post(queue, weight=7))

    weight = Queue.objects.get(pk=queue.pk).weight
    if who in EDITORS:
        assert page.status_code == 200
        assert b'name="weight"' in page.content
        assert saved.status_code == 302
        assert weight == 7
    elif who == "view_staff":
        assert page.status_code == 200
        assert b'name="weight"' not in page.content  # read-only: no inputs
        assert b"emails" in page.content
        assert saved.status_code == 403
        assert weight == 1
    else:
        assert is_login_redirect(page)
        assert is_login_redirect(saved)
        assert weight == 1


@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_queue_actions__matrix(users: dict[str, User | None], who: str) -> None:
    queue = QueueFactory(name="emails")
    client = client_for(users[who])
    url = reverse("admin:awa_queue_changelist")

    listing = client.get(url)
    acted = client.post(url, {"action": "pause_selected", "_selected_action": [queue.pk]})

    paused = Queue.objects.get(pk=queue.pk).paused
    if who in EDITORS:
        assert b"pause_selected" in listing.content
        assert acted.status_code == 302
        assert paused
    elif who == "view_staff":
        assert listing.status_code == 200
        assert b"pause_selected" not in listing.content  # the action is not offered
        assert b"emails" in listing.content
        assert not paused  # and a forged POST is refused
    else:
        assert is_login_redirect(listing)
        assert is_login_redirect(acted)
        assert not paused


@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_job_actions__matrix(users: dict[str, User | None], who: str) -> None:
    failed = JobFactory(state="failed", finalized_at=timezone.now())
    running = JobFactory(state="running")
    client = client_for(users[who])
    url = reverse("admin:awa_job_changelist")

    client.post(url, {"action": "retry_selected", "_selected_action": [failed.pk]})
    client.post(url, {"action": "delete_selected", "_selected_action": [running.pk], "post": "yes"})
    button = client.post(reverse("admin:awa_job_act", args=[running.pk, "cancel"]))

    states = dict(Job.objects.values_list("pk", "state"))
    if who in EDITORS:
        assert states == {failed.pk: "available"}
    else:
        assert states == {failed.pk: "failed", running.pk: "running"}
        assert button.status_code == 403 if who == "view_staff" else is_login_redirect(button)


@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_dashboard__matrix(users: dict[str, User | None], who: str) -> None:
    client = client_for(users[who])
    page = client.get(reverse("admin:awa_dashboard"))
    data = client.get(reverse("admin:awa_dashboard_data"))
    if who in ("superuser", "change_staff", "view_staff"):
        assert page.status_code == 200
        assert b"<svg" in page.content
        assert data.status_code == 200
        assert "queues" in data.json()
    else:
        assert is_login_redirect(page)
        assert is_login_redirect(data)


def test_dashboard__staff_without_awa_permissions_is_refused(db: None) -> None:
    client = client_for(User.objects.create_user("other", password=None, is_staff=True))
    assert client.get(reverse("admin:awa_dashboard")).status_code == 403
    assert client.get(reverse("admin:awa_dashboard_data")).status_code == 403


def test_job_detail__view_only_staff_see_no_action_buttons(users: dict[str, User | None]) -> None:
    job = JobFactory(state="failed", finalized_at=timezone.now())
    url = reverse("admin:awa_job_change", args=[job.pk])
    viewer = client_for(users["view_staff"]).get(url)
    editor = client_for(users["change_staff"]).get(url)
    assert viewer.status_code == editor.status_code == 200
    assert b"Retry now" not in viewer.content
    assert b"Retry now" in editor.content


def test_dashboard__staff_who_may_view_jobs_only_may_view_it(db: None) -> None:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("jobs_viewer", password=None, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job", content_type__app_label="awa"))
    client = client_for(user)

    assert client.get(reverse("admin:awa_dashboard")).status_code == 200
    assert client.get(reverse("admin:awa_dashboard_data")).status_code == 200


def test_dashboard__on_a_site_without_the_job_admin_needs_the_queue_view_permission(db: None) -> None:
    from django.contrib.admin import AdminSite
    from django.contrib.auth.models import Permission
    from django.core.exceptions import PermissionDenied
    from django.test import RequestFactory

    from awa_django.admin.queues import QueueAdmin

    site = AdminSite(name="queues_only")
    site.register(Queue, QueueAdmin)
    queue_admin = site.get_model_admin(Queue)
    user = User.objects.create_user("jobs_viewer", password=None, is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job", content_type__app_label="awa"))
    request = RequestFactory().get("/queues_only/awa/queue/dashboard/data/")
    request.user = user

    with pytest.raises(PermissionDenied):
        queue_admin.dashboard_data_view(request)  # type: ignore[attr-defined]
