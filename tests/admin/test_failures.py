"""Triage failures: failed jobs grouped by kind and error signature (class plus normalised message)
with count, first and last seen, and group retry/delete audited; tracebacks show the user's frames
first with awa's folded."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from awa_django.admin.tracebacks import split_frames
from awa_django.models import Job
from awa_django.services.failures import failure_groups, normalise, signature
from tests.admin.conftest import client_for

URL = "/admin/awa/job/failures/"


def _failed(kind: str, error: str, ago: timedelta, exception: str | None = None) -> Job:
    entry = {"error": error, "attempt": 1, "at": "x"} | ({"exception": exception} if exception else {})
    return Job.objects.create(
        kind=kind, state="failed", attempt=1, finalized_at=timezone.now() - ago, errors=[{"error": "older"}, entry]
    )


@pytest.fixture
def failures() -> dict[str, list[Job]]:
    return {
        "missing": [_failed("mail", f"KeyError: 'user {n}'", timedelta(minutes=n)) for n in range(1, 6)],
        "gateway": [
            _failed("charge", f"billing.GatewayError: card {n} declined after {n}.5s", timedelta(hours=n))
            for n in range(1, 4)
        ],
        "other_kind": [_failed("refund", "billing.GatewayError: card 1 declined after 1.5s", timedelta(hours=1))],
    }


@pytest.mark.django_db
def test_failure_groups__by_kind_and_signature_with_count_and_first_last_seen(failures: dict[str, list[Job]]) -> None:
    triage = failure_groups()
    shown = {(g.kind, g.exception, g.message): g for g in triage.groups}
    assert set(shown) == {
        ("mail", "KeyError", "'…'"),
        ("charge", "billing.GatewayError", "card N declined after Ns"),
        ("refund", "billing.GatewayError", "card N declined after Ns"),
    }
    for name, (kind, cls, message) in {
        "missing": ("mail", "KeyError", "'…'"),
        "gateway": ("charge", "billing.GatewayError", "card N declined after Ns"),
    }.items():
        group, jobs = shown[(kind, cls, message)], failures[name]
        assert group.count == len(jobs)
        assert set(group.ids) == {j.pk for j in jobs}
        ended = [j.finalized_at for j in jobs if j.finalized_at is not None]
        assert len(ended) == len(jobs)  # every failed job has its end time
        assert group.first_seen == min(ended)
        assert group.last_seen == max(ended)
    assert [g.count for g in triage.groups] == sorted((g.count for g in triage.groups), reverse=True)
    assert (triage.read, triage.more) == (9, False)
    assert failure_groups(window=4).more is True


@pytest.mark.django_db
def test_failures_page_and_group_actions__audited(admin_client: Client, failures: dict[str, list[Job]]) -> None:
    page = admin_client.get(URL).content.decode()
    group = next(g for g in failure_groups().groups if g.kind == "charge")
    assert f'data-group="{group.key}" data-count="3"' in page
    assert "card N declined after Ns" in page

    retried = admin_client.post(reverse("admin:awa_job_failures_act"), {"group": group.key, "action": "retry"})
    assert retried.status_code == 302
    assert {j.state for j in Job.objects.filter(pk__in=[j.pk for j in failures["gateway"]])} == {"available"}
    assert Job.objects.get(pk=failures["other_kind"][0].pk).state == "failed"  # another kind, another group
    [entry] = LogEntry.objects.all()
    assert (
        "retry failure group charge: billing.GatewayError" in entry.change_message and "3 of 3" in entry.change_message
    )

    mail = next(g for g in failure_groups().groups if g.kind == "mail")
    confirm = admin_client.post(reverse("admin:awa_job_failures_act"), {"group": mail.key, "action": "delete"})
    assert confirm.status_code == 200 and Job.objects.filter(kind="mail").exists()  # a confirmation first
    admin_client.post(reverse("admin:awa_job_failures_act"), {"group": mail.key, "action": "delete", "post": "yes"})
    assert not Job.objects.filter(kind="mail").exists()
    gone = admin_client.post(reverse("admin:awa_job_failures_act"), {"group": mail.key, "action": "retry"}, follow=True)
    assert "That failure group is gone" in gone.content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "change_staff", "view_staff", "non_staff", "anonymous"])
def test_failures__matrix(users: dict[str, User | None], who: str, failures: dict[str, list[Job]]) -> None:
    client = client_for(users[who])
    group = failure_groups().groups[0]
    page = client.get(URL)
    acted = client.post(reverse("admin:awa_job_failures_act"), {"group": group.key, "action": "retry"})
    failed = Job.objects.filter(state="failed").count()
    if who in ("superuser", "change_staff"):
        assert page.status_code == 200 and b"Retry this group" in page.content
        assert acted.status_code == 302 and failed == 9 - group.count
    elif who == "view_staff":
        assert page.status_code == 200 and b"Retry this group" not in page.content
        assert acted.status_code == 403 and failed == 9
    else:
        assert page.status_code == acted.status_code == 302 and failed == 9


@pytest.mark.django_db
@pytest.mark.parametrize("data", [{}, {"action": "explode", "group": "x"}, {"action": "retry", "group": "\x00"}])
def test_failures_act__odd_input_never_500(admin_client: Client, data: dict[str, str]) -> None:
    assert admin_client.post(reverse("admin:awa_job_failures_act"), data).status_code in (302, 403)


@given(st.integers(0, 10**12), st.integers(0, 10**12), st.uuids(), st.uuids())
def test_signature__values_that_vary_do_not_split_a_group(a: int, b: int, u: object, v: object) -> None:
    one = signature(f"ValueError: order {a} of customer {u} failed")
    two = signature(f"ValueError: order {b} of customer {v} failed")
    assert one == two == ("ValueError", "order N of customer <uuid> failed")


def test_normalise__hex_quoted_and_numbers() -> None:
    assert normalise("id 0xdeadbeef in 'acme' took 3.25s") == "id <hex> in '…' took Ns"


TRACEBACK = """Traceback (most recent call last):
  File "/srv/venv/lib/python3.12/site-packages/awa_django/worker/executor.py", line 140, in execute
    result = await call
  File "/srv/app/shop/jobs.py", line 12, in send_receipt
    render(order)
  File "/srv/app/shop/render.py", line 5, in render
    raise ValueError("no template")
ValueError: no template
"""


def test_traceback__user_frames_first_awa_folded(admin_client: Client, db: None) -> None:
    user, awa, last = split_frames(TRACEBACK)
    assert [f.split('"')[1] for f in user] == ["/srv/app/shop/jobs.py", "/srv/app/shop/render.py"]
    assert len(awa) == 1 and "awa_django/worker/executor.py" in awa[0]
    assert last == "ValueError: no template"
    job = Job.objects.create(kind="k", state="failed", errors=[{"error": "ValueError: no template", "attempt": 1,
                                                                 "at": "x", "traceback": TRACEBACK}])  # fmt: skip
    html = admin_client.get(reverse("admin:awa_job_change", args=[job.pk])).content.decode()
    shown = html.split('<pre class="awa-pre awa-traceback">', 1)[1].split("</pre>", 1)[0]
    assert "shop/jobs.py" in shown and "awa_django" not in shown and shown.rstrip().endswith("no template")
    assert "1 frame of awa_django, folded" in html


@pytest.mark.django_db
def test_failure_groups__window_is_the_latest_failed_jobs_a_null_finalized_at_first() -> None:
    older = _failed("mail", "KeyError: 'a'", timedelta(hours=2))
    newer = _failed("mail", "KeyError: 'b'", timedelta(minutes=1))
    by_hand = Job.objects.create(kind="mail", state="failed", attempt=1, errors=[{"error": "KeyError: 'c'"}])
    triage = failure_groups(window=2)
    assert triage.read == 2 and triage.more is True
    assert sorted(i for g in triage.groups for i in g.ids) == sorted([by_hand.pk, newer.pk])
    assert older.pk not in {i for g in triage.groups for i in g.ids}


@pytest.mark.django_db
def test_failure_groups__reads_the_finalized_index_backwards_and_never_sorts_every_failed_job() -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="mail", state="failed", attempt=1, finalized_at=now - timedelta(seconds=n), errors=[{"error": "x"}])
        for n in range(2000)
    )
    with connection.cursor() as cursor:
        # The planner weighs reading 6 entries against 2,000, on these rows' statistics: the failed
        # jobs live in awa_job_done's partition, and unanalyzed (autovacuum had not reached it) its
        # estimate of one row made a Sort of the two branches the cheaper plan (flake hunt, run 2).
        cursor.execute("ANALYZE awa_job")
        cursor.execute("ANALYZE awa_job_done")
    with CaptureQueriesContext(connection) as captured:
        failure_groups(window=5)
    (sql,) = [q["sql"] for q in captured.captured_queries]
    with connection.cursor() as cursor:
        # A table this small would be read whole; forbid that so the plan shows the index's order.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        cursor.execute(f"EXPLAIN {sql}")
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan Backward using awa_job_finalized_idx" in plan, plan
    assert not re.search(r"^\s*(->\s+)?Sort\s+\(cost", plan, re.MULTILINE), plan  # an incremental sort at most
