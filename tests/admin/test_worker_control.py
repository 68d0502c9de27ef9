"""The workers' admin: who may send a worker a request, what is refused (with a message, never a
500), what is audited, and that a request shows as pending until the worker acknowledges it.
The worker's side, with a real process, is tests/worker/test_control.py."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django.exceptions import WorkerRequestError
from awa_django.models import WorkerInstance, WorkerRequest
from awa_django.services.control import request_drain, request_hold, request_resume
from awa_django.snapshot import WorkerFlags
from tests.admin.conftest import client_for, messages_of

pytestmark = pytest.mark.django_db

EDITORS = ["superuser", "change_staff"]
SERVED = {"emails": {"mode": "hard_reserved", "capacity": {"type": "HardReserved", "max_workers": 4},
                     "in_flight": 0, "available": 4, "paused": False, "jobs_available": 0},
          "reports": {"mode": "hard_reserved", "capacity": {"type": "HardReserved", "max_workers": 2},
                      "in_flight": 0, "available": 2, "paused": False, "jobs_available": 0}}  # fmt: skip


def _flags(**changes: object) -> dict[str, object]:
    flags = WorkerFlags(listening=True, leader=False, stopping=False, in_flight=0, sync_running=0,
                        capacity_scope="process").to_json()  # fmt: skip
    flags.update(changes)
    return flags


def make_worker(seen_ago: float = 0.0, **flags: object) -> WorkerInstance:
    now = timezone.now()
    return WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=4242, started_at=now - timedelta(minutes=5),
        last_seen_at=now - timedelta(seconds=seen_ago), mode="hard_reserved", queues=SERVED, flags=_flags(**flags),
    )  # fmt: skip


def control_url(worker: WorkerInstance | int) -> str:
    pk = worker if isinstance(worker, int) else worker.pk
    return reverse("admin:awa_workerinstance_control", args=[pk])


@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_worker_page_and_control__matrix(users: dict[str, User | None], who: str) -> None:
    worker = make_worker()
    client = client_for(users[who])

    listing = client.get(reverse("admin:awa_workerinstance_changelist"))
    page = client.get(reverse("admin:awa_workerinstance_change", args=[worker.pk]))
    drain = client.post(control_url(worker), {"action": "drain"})
    hold = client.post(control_url(worker), {"action": "hold", "queue": "emails"})

    sent = list(WorkerRequest.objects.order_by("id").values_list("action", "queue", "requested_by"))
    if who in EDITORS:
        assert listing.status_code == page.status_code == 200
        assert b"Drain and stop" in page.content and b"Stop claiming" in page.content
        assert drain.status_code == hold.status_code == 302
        name = users[who].get_username()  # type: ignore[union-attr]
        assert sent == [("drain", "", name), ("hold", "emails", name)]
        logged = list(LogEntry.objects.order_by("id").values_list("change_message", flat=True))
        assert [m.split(" (request")[0] for m in logged] == [
            "asked box:4242 to drain and stop",
            "asked box:4242 to stop claiming queue 'emails'",
        ]
    elif who == "view_staff":
        assert listing.status_code == page.status_code == 200
        assert b"box:4242" in page.content
        assert b"Drain and stop" not in page.content  # no control offered
        assert drain.status_code == hold.status_code == 403  # and a forged POST is refused
        assert sent == []
    else:
        for response in (listing, page, drain, hold):
            assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
        assert sent == []


def test_request__pending_until_the_worker_acknowledges_it(users: dict[str, User | None]) -> None:
    worker = make_worker()
    client = client_for(users["superuser"])
    client.post(control_url(worker), {"action": "hold", "queue": "reports"})
    page = client.get(reverse("admin:awa_workerinstance_change", args=[worker.pk])).content.decode()
    assert "stop claiming queue &#x27;reports&#x27; (asked by root" in page and ": pending" in page
    assert 'data-pending="1"' in page

    WorkerRequest.objects.update(acknowledged_at=timezone.now(), answer="holding queue 'reports'")
    WorkerInstance.objects.filter(pk=worker.pk).update(flags=_flags(held_queues=["reports"]))
    page = client.get(reverse("admin:awa_workerinstance_change", args=[worker.pk])).content.decode()
    assert 'data-pending="1"' not in page and "holding queue &#x27;reports&#x27;" in page
    assert "holding reports" in page  # the worker's own flag
    assert b"holding reports" in client.get(reverse("admin:awa_dashboard")).content


@pytest.mark.parametrize(
    ("post", "message"),
    [
        ({"action": "hold", "queue": "nope"}, "does not serve queue 'nope'; it serves: emails, reports"),
        ({"action": "resume", "queue": "emails"}, "does not hold queue 'emails'; nothing to resume"),
        ({"action": "explode"}, "unknown request 'explode'; use one of 'drain', 'hold', 'resume'"),
        ({"action": "hold", "queue": "a\x00b"}, "does not serve queue 'a\\x00b'"),
        ({"action": "hold", "queue": "x" * 5000}, "does not serve queue 'xxxx"),
        ({}, "unknown request ''"),
    ],
)
def test_control__refused_requests__a_message_naming_the_value_and_nothing_sent(
    users: dict[str, User | None], post: dict[str, str], message: str
) -> None:
    worker = make_worker()
    response = client_for(users["superuser"]).post(control_url(worker), post, follow=True)
    assert response.status_code == 200
    shown = " ".join(messages_of(response))
    assert "Nothing sent" in shown and message in shown, shown
    assert not WorkerRequest.objects.exists()
    assert not LogEntry.objects.exists()


def test_control__a_gone_worker__says_so_and_sends_nothing(users: dict[str, User | None]) -> None:
    stale = make_worker(seen_ago=3600)
    client = client_for(users["superuser"])
    response = client.post(control_url(stale), {"action": "drain"}, follow=True)
    shown = " ".join(messages_of(response))
    # The age is read when the request is handled: a second or more after the row was written on a
    # loaded machine (a flake hunt saw 3601s).
    age = re.search(r"worker box:4242 is gone: its last snapshot is (\d+)s old", shown)
    assert age is not None and 3600 <= int(age.group(1)) <= 3660, shown

    removed = make_worker()
    pk = removed.pk
    removed.delete()
    response = client.post(control_url(pk), {"action": "drain"}, follow=True)
    assert response.status_code == 200
    assert f"worker #'{pk}' is gone" in " ".join(messages_of(response))
    for odd in ["²", "9" * 30, "-1"]:
        assert client.post(f"/admin/awa/workerinstance/{odd}/control/", {"action": "drain"}).status_code in (302, 404)
    assert not WorkerRequest.objects.exists()


def test_control__a_stopping_worker_or_a_second_drain__refused(db: None) -> None:
    with pytest.raises(WorkerRequestError, match="already stopping"):
        request_drain(make_worker(stopping=True))
    worker = make_worker()
    request_drain(worker, requested_by="ann")
    with pytest.raises(WorkerRequestError, match="already asked to drain; it has not answered yet"):
        request_drain(worker)
    request_hold(worker, "emails")
    with pytest.raises(WorkerRequestError, match="already holds queue 'emails'"):
        request_hold(worker, "emails")
    request_resume(worker, "emails")  # a hold still pending may be taken back
    assert WorkerRequest.objects.filter(acknowledged_at__isnull=True).count() == 3


def test_control__get_is_not_allowed(users: dict[str, User | None]) -> None:
    assert client_for(users["superuser"]).get(control_url(make_worker())).status_code == 405


@settings(max_examples=60, deadline=None)
@given(queue=st.text(max_size=40))
def test_request_hold__sent_exactly_when_the_worker_serves_the_queue(queue: str) -> None:
    worker = make_worker()
    try:
        sent = request_hold(worker, queue)
    except WorkerRequestError as exc:
        assert queue not in SERVED
        assert repr(queue) in str(exc)
    else:
        assert queue in SERVED and sent.queue == queue
    finally:
        WorkerRequest.objects.all().delete()
        worker.delete()


def test_worker_list__a_queue_entry_that_is_not_an_object_reads_as_claiming(admin_client: Client) -> None:
    """``(entry or {}).get("paused")`` raised AttributeError on an entry written as text: the
    Workers list answered 500 for every worker, where the dashboard reads such an entry as none."""
    worker = make_worker()
    WorkerInstance.objects.filter(pk=worker.pk).update(queues={**SERVED, "odd": "x", "gone": None})

    response = admin_client.get(reverse("admin:awa_workerinstance_changelist"))

    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-queue="odd">odd (claiming)' in page and 'data-queue="gone">gone (claiming)' in page
