"""The admin answers every id, filter and search value with a page, a redirect or a 404, never a
500: ``?q=²`` (isdigit but not an int), ``/job/²/change/``, a POST to its cancel
button, a NUL in the kind or queue filter, and whatever else a URL can carry.

The test client re-raises any exception a view lets escape, so a 500 fails these tests with the
exception itself.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.models import Job, WorkerCapacity
from tests.admin.conftest import client_for
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

# Values that broke the admin, and their neighbours: non-ASCII digits (str.isdigit() is True for
# "²" but int() refuses it; int() accepts Arabic-Indic digits), NUL, out-of-range and long numbers.
ODD = [
    "²", "\u0661", "\u0663\u0664", "\x00", "a\x00b", "1\x00", "-1", "0", "+1", " 1", "1.5", "1e3", "0x10",
    "9" * 19, "9" * 30, "9" * 5000, "", " ", "#", "#²", "%", "'", "\\", "_5B", "a/b", "..", "null",
    "\ufffd", "😀", "\u202e", "\t",
]  # fmt: skip
ODD_IDS = [f"{i}:{v.encode('unicode_escape').decode()[:12]}" for i, v in enumerate(ODD)]


@pytest.fixture
def admin_client(db: None) -> Client:
    return client_for(User.objects.create_superuser("root", password=None))


@pytest.fixture
def job(db: None) -> Job:
    QueueFactory(name="emails")
    return Job.objects.enqueue("send", queue="emails")


def _ok(response: Any) -> None:
    assert response.status_code in (200, 302, 404), response.status_code


def _check_object_urls(client: Client, value: str) -> None:
    segment = quote(value, safe="")
    for model in ("job", "queue"):
        for page in ("change", "delete", "history"):
            _ok(client.get(f"/admin/awa/{model}/{segment}/{page}/"))
        _ok(client.post(f"/admin/awa/{model}/{segment}/delete/", {"post": "yes"}))
    for action in ("cancel", "retry", "restart", "bogus"):
        _ok(client.post(f"/admin/awa/job/{segment}/act/{action}/"))


def _check_lists(client: Client, value: str) -> None:
    names = ["q", "kind", "queue", "state__exact", "state__isnull", "parked", "p", "o", "e", "all", "every_state"]
    names += ["before", "after"]  # the page's id bound
    for name in names:
        _ok(client.get(f"/admin/awa/job/?{urlencode({name: value})}"))
    _ok(client.get(f"/admin/awa/job/?{urlencode({'q': 'user_id=1', 'every_state': value})}"))
    for name in ("q", "p", "o", "paused__exact"):
        _ok(client.get(f"/admin/awa/queue/?{urlencode({name: value})}"))
    for path in ("/admin/awa/queue/dashboard/", "/admin/awa/queue/dashboard/data/"):
        _ok(client.get(f"{path}?{urlencode({'q': value, 'minutes': value})}"))


def _check_actions(client: Client, value: str, job: Job) -> None:
    for action in ("cancel_selected", "retry_selected", "delete_selected"):
        _ok(client.post("/admin/awa/job/", {"action": action, "_selected_action": [value, str(job.pk)]}))
    for action in ("pause_selected", "resume_selected"):
        _ok(client.post("/admin/awa/queue/", {"action": action, "_selected_action": [value]}))


@pytest.mark.parametrize("value", ODD, ids=ODD_IDS)
def test_admin__odd_ids_and_filters_never_500(admin_client: Client, job: Job, value: str) -> None:
    _check_object_urls(admin_client, value)
    _check_lists(admin_client, value)
    _ok(admin_client.post(f"/admin/awa/job/{job.pk}/act/restart/", {"step": value}))  # the step to restart from


@pytest.mark.parametrize("value", ["²", "\x00", "9" * 5000, "-1", "a"], ids=["sup2", "nul", "5000-digits", "neg", "a"])
def test_admin__odd_selected_ids_in_actions_never_500(admin_client: Client, job: Job, value: str) -> None:
    _check_actions(admin_client, value, job)

    # A selection holding an id no row can have is refused whole, saying so: the valid id next
    # to it was neither cancelled nor deleted.
    assert Job.objects.get(pk=job.pk).state == "available"
    response = admin_client.post(
        "/admin/awa/job/", {"action": "cancel_selected", "_selected_action": [value, str(job.pk)]}, follow=True
    )
    assert any("is not a valid id" in str(m) for m in response.context["messages"])


def test_admin__search_for_superscript_two_is_an_empty_result_not_a_job(admin_client: Client, job: Job) -> None:
    response = admin_client.get("/admin/awa/job/?q=²")

    assert response.status_code == 200
    assert list(response.context["cl"].result_list) == []


def test_admin__nul_in_kind_or_queue_filter_matches_nothing(admin_client: Client, job: Job) -> None:
    for name in ("kind", "queue"):
        response = admin_client.get(f"/admin/awa/job/?{urlencode({name: 'send' + chr(0)})}")
        assert response.status_code == 200
        assert list(response.context["cl"].result_list) == []
    assert list(admin_client.get("/admin/awa/job/?kind=send").context["cl"].result_list) == [job]


def test_admin__job_page_for_superscript_two_is_not_found(admin_client: Client, job: Job) -> None:
    change = admin_client.get("/admin/awa/job/²/change/")
    assert change.status_code in (302, 404)  # Django's "does not exist" redirect, or 404

    cancel = admin_client.post("/admin/awa/job/²/act/cancel/")
    assert cancel.status_code == 404
    assert Job.objects.get(pk=job.pk).state == "available"  # nothing was cancelled


# About 40 admin requests an example (1 s here): 15 in the ci profile, beside the 31 odd values
# above; HYPOTHESIS_PROFILE=thorough runs 150.
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.text(st.characters(codec="utf-8"), max_size=8))
def test_admin__any_text_as_id_filter_or_search_never_500(admin_client: Client, job: Job, value: str) -> None:
    _check_object_urls(admin_client, value)
    _check_lists(admin_client, value)


# Every other admin of the app, as the Job and Queue lists above: each of its list filters and
# each of its actions, given a value no row can have (read from the changelist page itself, so a
# filter or action added later is checked too).
OTHER_ADMINS = ["schedule", "fairkey", "workflow", "workerinstance", "workercapacity", "clustersettings"]


def _filters_and_actions(client: Client, model: str) -> tuple[list[str], list[str]]:
    page = client.get(f"/admin/awa/{model}/")
    assert page.status_code == 200
    cl = page.context["cl"]
    names = [name for spec in cl.filter_specs for name in spec.expected_parameters()]
    # A field's own lookup is a filter too (Django takes ?mode__exact=… on any field of the model).
    names += [f"{field.name}__exact" for field in cl.model._meta.fields if field.get_internal_type() == "CharField"]
    form = page.context["action_form"]
    actions = [value for value, _ in form.fields["action"].choices if value] if form is not None else []
    return names, actions


@pytest.mark.parametrize("model", OTHER_ADMINS)
@pytest.mark.parametrize(
    "value", ["²", "\x00", "a\x00b", "1.5", "9" * 30, "-1"], ids=["sup2", "nul", "a-nul-b", "1.5", "30-digits", "neg"]
)
def test_other_admins__odd_filter_values_and_selections_never_500(admin_client: Client, model: str, value: str) -> None:
    filters, actions = _filters_and_actions(admin_client, model)
    for name in [*filters, "q"]:
        _ok(admin_client.get(f"/admin/awa/{model}/?{urlencode({name: value})}"))
    for action in actions:
        _ok(admin_client.post(f"/admin/awa/{model}/", {"action": action, "_selected_action": [value]}))


def test_other_admins__a_selection_of_real_uuid_keys_still_acts(admin_client: Client) -> None:
    # WorkerCapacity's key is a UUID: the selection check reads it by its field, not as an integer id.
    row = WorkerCapacity.objects.create(instance_id=uuid.uuid4(), reported_at=timezone.now())
    response = admin_client.post(
        "/admin/awa/workercapacity/",
        {"action": "delete_selected", "_selected_action": [str(row.pk)], "post": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    assert not WorkerCapacity.objects.exists()
