"""Act on thousands: retry, cancel or delete everything the list's filter matches, previewed
(count and sample), confirmed, run in chunks of short SKIP LOCKED transactions that stop between
chunks, each chunk audited in the admin's LogEntry (who, the filter, how many)."""

from __future__ import annotations

import itertools
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from awa_django.admin.bulk import CHUNK, MAX_PAUSE, PACE, SAMPLE, STEP, apply_paced, pause_after
from awa_django.models import Job
from awa_django.services.jobs import retry_jobs
from tests.admin.conftest import client_for
from tests.conftest import connect_outside_django

FILTER = {"state__exact": "failed", "queue": "bulk"}


def _failed(queue: str, count: int) -> list[int]:
    now = timezone.now()
    Job.objects.bulk_create(
        [Job(kind="k", queue=queue, state="failed", attempt=1, max_attempts=1, finalized_at=now) for _ in range(count)]
    )
    return list(Job.objects.filter(queue=queue, state="failed").order_by("pk").values_list("pk", flat=True))


def _url(action: str, query: dict[str, str] | None = None) -> str:
    return reverse("admin:awa_job_bulk", args=[action]) + "?" + urlencode(FILTER if query is None else query)


def _run(client: Client, action: str, query: dict[str, str] | None = None, chunks: int | None = None) -> list[Any]:
    """POST chunk after chunk as the page's script does; ``chunks`` stops after that many."""
    answers: list[Any] = []
    after = 0
    while chunks is None or len(answers) < chunks:
        answer = client.post(_url(action, query), {"after": after}).json()
        answers.append(answer)
        if answer["finished"]:
            break
        after = answer["after"]
    return answers


@pytest.mark.django_db
def test_bulk_retry__preview_then_chunks_over_the_whole_filter_audited(admin_client: Client) -> None:
    ids = _failed("bulk", 2 * CHUNK + 500)
    others = _failed("elsewhere", 5)
    Job.objects.create(kind="k", queue="bulk")  # available: not in the filter

    preview = admin_client.get(_url("retry"))
    html = preview.content.decode()
    assert preview.status_code == 200
    assert f"<strong>{len(ids)}</strong> jobs match" in html
    assert [int(x) for x in _data_jobs(html)] == ids[:SAMPLE]
    assert "state__exact=failed&amp;queue=bulk" in html
    assert Job.objects.filter(pk__in=ids, state="failed").count() == len(ids)  # a preview changes nothing

    answers = _run(admin_client, "retry")
    assert [(a["chunk"], a["done"]) for a in answers] == [(CHUNK, CHUNK), (CHUNK, CHUNK), (500, 500)]
    assert Job.objects.filter(pk__in=ids, state="available").count() == len(ids)
    assert set(Job.objects.filter(pk__in=others).values_list("state", flat=True)) == {"failed"}

    entries = list(LogEntry.objects.order_by("pk"))
    assert len(entries) == 3
    assert {e.user.username for e in entries} == {"admin"}
    assert all("state__exact=failed&queue=bulk" in e.change_message for e in entries)
    assert entries[0].change_message.endswith(f"retry {CHUNK} of {CHUNK} job(s), ids {ids[0]} to {ids[CHUNK - 1]}")


def _data_jobs(html: str) -> list[str]:
    import re

    return re.findall(r'data-job="(\d+)"', html)


@pytest.mark.django_db
def test_bulk_cancel__stopped_after_one_chunk__the_rest_untouched(admin_client: Client) -> None:
    Job.objects.bulk_create([Job(kind="k", queue="bulk") for _ in range(CHUNK + 10)])
    query = {"queue": "bulk", "state__exact": "available"}
    [answer] = _run(admin_client, "cancel", query, chunks=1)
    assert (answer["done"], answer["finished"]) == (CHUNK, False)
    assert Job.objects.filter(queue="bulk", state="cancelled").count() == CHUNK
    assert Job.objects.filter(queue="bulk", state="available").count() == 10
    assert LogEntry.objects.count() == 1


def test_pause_after__the_chunk_time_times_the_pace__bounded() -> None:
    assert pause_after(0.2) == pytest.approx(PACE * 0.2)
    assert pause_after(0.0) == 0.0
    assert pause_after(-1.0) == 0.0  # a clock step backwards: no pause, never a negative one
    assert pause_after(1e6) == MAX_PAUSE


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("count", [0, 1, STEP, STEP + 1, 3 * STEP + 7])
def test_apply_paced__steps_of_at_most_step_ids_each_its_own_transaction_paused_between(count: int) -> None:
    """A chunk is applied STEP ids at a time, in order, each step a transaction of its own (the
    service's, not nested in one around the chunk), and between two steps at least the pause the
    first one's time asked for elapses (the clock, not a count of sleeps)."""
    jobs = _failed("paced", count)
    calls: list[tuple[list[int], float, float, bool]] = []

    def service(ids: list[int], *, skip_locked: bool) -> int:
        assert skip_locked
        outside = not connection.in_atomic_block  # no transaction around the chunk
        began = time.monotonic()
        done = retry_jobs(ids, skip_locked=skip_locked)
        calls.append((ids, began, time.monotonic(), outside))
        return done

    done, pause = apply_paced(service, jobs)
    assert done == count == Job.objects.filter(queue="paced", state="available").count()
    assert [i for ids, *_ in calls for i in ids] == jobs
    assert all(0 < len(ids) <= STEP and outside for ids, _, _, outside in calls)
    assert len(calls) == -(-count // STEP)
    for (_, began, ended, _), (_, next_began, _, _) in itertools.pairwise(calls):
        assert next_began - ended >= pause_after(ended - began) * 0.99
    assert (0 < pause <= MAX_PAUSE) == bool(calls) and pause >= 0.0


@pytest.mark.django_db
def test_bulk_chunk__names_the_pause_the_page_waits_before_the_next() -> None:
    Job.objects.bulk_create([Job(kind="k", queue="bulk") for _ in range(CHUNK + 1)])
    client = client_for(User.objects.create_superuser("pacer", "p@example.com", "pw"))
    [answer] = _run(client, "cancel", {"queue": "bulk", "state__exact": "available"}, chunks=1)
    assert answer["finished"] is False
    assert isinstance(answer["pause_ms"], int) and 0 <= answer["pause_ms"] <= 1000 * MAX_PAUSE


@pytest.mark.django_db
def test_bulk_delete__deletes_the_filter_only(admin_client: Client) -> None:
    ids = _failed("bulk", 30)
    keep = _failed("elsewhere", 3)
    answers = _run(admin_client, "delete")
    assert sum(a["done"] for a in answers) == 30
    assert not Job.objects.filter(pk__in=ids).exists()
    assert Job.objects.filter(pk__in=keep).count() == 3


@pytest.mark.django_db(transaction=True)
def test_bulk__a_row_a_worker_holds_is_skipped_not_waited_for() -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    ids = _failed("bulk", 20)
    with connect_outside_django() as other, other.transaction():
        # A failed job lives in awa_job_done (migration 0023); held until the block ends.
        other.execute("SELECT id FROM awa_job_done WHERE id = %s FOR UPDATE", [ids[3]])
        answers = _run(client, "retry")
    assert [(a["done"], a["skipped"]) for a in answers] == [(19, 1)]
    assert Job.objects.get(pk=ids[3]).state == "failed"
    assert Job.objects.filter(pk__in=ids, state="available").count() == 19


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
@pytest.mark.parametrize("action", ["retry", "cancel", "delete"])
def test_bulk__matrix(users: dict[str, User | None], who: str, action: str) -> None:
    ids = _failed("bulk", 3)
    client = client_for(users[who])
    preview = client.get(_url(action))
    posted = client.post(_url(action), {"after": 0})
    allowed = who in ("superuser", "change_staff")  # change_staff holds delete_job too
    if allowed:
        assert preview.status_code == posted.status_code == 200
    elif who == "view_staff":
        assert preview.status_code == posted.status_code == 403
        assert Job.objects.filter(pk__in=ids, state="failed").count() == 3
        assert LogEntry.objects.count() == 0
    else:
        assert preview.status_code == posted.status_code == 302
        assert Job.objects.filter(pk__in=ids, state="failed").count() == 3


@pytest.mark.django_db
def test_bulk__staff_who_may_change_but_not_delete_cannot_delete(db: None) -> None:
    from django.contrib.auth.models import Permission

    user = User.objects.create_user("changer_only", password=None, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_job", "change_job"]))
    client = client_for(user)
    assert client.get(_url("retry")).status_code == 200
    assert client.get(_url("delete")).status_code == 403
    listing = client.get(reverse("admin:awa_job_changelist")).content.decode()
    assert 'id="awa-bulk-retry"' in listing and 'id="awa-bulk-delete"' not in listing


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "query", "after", "status"),
    [
        ("explode", FILTER, "0", 404),
        ("retry", {"bogus__lookup": "1"}, "0", 400),
        ("retry", {"state__exact": "fa\x00iled"}, "0", 200),
        ("retry", {"q": "{not json"}, "0", 200),
        ("retry", FILTER, "abc", 200),
        ("retry", FILTER, "9" * 30, 200),
    ],
)
def test_bulk__odd_input_never_500(
    admin_client: Client, action: str, query: dict[str, str], after: str, status: int
) -> None:
    _failed("bulk", 2)
    assert admin_client.get(_url(action, query)).status_code == status
    assert admin_client.post(_url(action, query), {"after": after}).status_code == status
