"""One name for fair keys in the admin ("fair key"; the override rows are "fair key overrides"), the
Job list's fair key filter offering every key that has jobs (a bounded loose index scan, not only
the override rows), the queue list linking each queue's live keys page, and the queue list's paused
column drawing a badge only where a queue is paused (never Django's red ✗ on a running queue)."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.admin.filters import keys_with_jobs
from awa_django.models import FairKey, Job
from awa_django.sql import statements
from tests.admin.test_queue_no_worker import row_of
from tests.factories import QueueFactory

pytestmark = pytest.mark.django_db

PAGES = ("/admin/", "/admin/awa/", "/admin/awa/fairkey/", "/admin/awa/job/", "/admin/awa/queue/")


def _filter_choices(page: str) -> list[str]:
    """The fair key filter's choices, as the Job list's sidebar lists them."""
    block = re.search(r"By fair key</summary>(.*?)</ul>", page, re.S) or re.search(r"By fair key(.*?)</ul>", page, re.S)
    assert block, "the Job list has no fair key filter"
    return re.findall(r'<a href="\?[^"]*fair_key=[^"]*"[^>]*>([^<]*)</a>', block.group(1))


def test_admin__says_fair_key_and_never_fairness_key(admin_client: Client) -> None:
    QueueFactory(name="exports")
    FairKey.objects.create(queue="exports", key="tenant:1", weight=2)
    Job.objects.enqueue("export", queue="exports", fair_key="tenant:1")

    for url in PAGES:
        page = admin_client.get(url).content.decode()
        assert "fairness" not in page.lower(), url
    sidebar = admin_client.get("/admin/").content.decode()
    assert ">Fair key overrides</a>" in sidebar  # the rows override a key's weight or cap; keys need none
    overrides = admin_client.get("/admin/awa/fairkey/").content.decode()
    assert "Select fair key override to change" in overrides
    assert re.search(r'<th scope="col" class="sortable column-key_shown[^"]*">.*?>Fair key</a>', overrides, re.S)
    jobs = admin_client.get("/admin/awa/job/").content.decode()
    assert re.search(r'class="column-key_shown">\s*<div class="text"><span>Fair key</span>', jobs)


def test_job_filter__offers_a_key_that_has_jobs_but_no_override_row(admin_client: Client) -> None:
    Job.objects.enqueue("export", queue="exports", fair_key="tenant:waiting")
    running = Job.objects.enqueue("export", queue="reports", fair_key="tenant:running")
    Job.objects.filter(pk=running.pk).update(state="running", attempt=1)
    FairKey.objects.create(queue="exports", key="tenant:override-only", weight=3)
    assert not FairKey.objects.filter(key__in=["tenant:waiting", "tenant:running"]).exists()

    choices = _filter_choices(admin_client.get("/admin/awa/job/").content.decode())

    assert {"tenant:waiting", "tenant:running", "tenant:override-only", "(default key)"} <= set(choices)
    assert len(choices) == len(set(choices))  # a key in several queues is offered once


PAIRS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["", "k1", "k2", "k3"]), st.sampled_from(
        ["available", "running", "completed", "scheduled"]
    )),
    max_size=30,
)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=PAIRS, limit=st.integers(1, 6))
def test_keys_with_jobs__the_first_limit_queue_key_pairs_of_available_and_of_running_jobs(
    rows: list[tuple[str, str, str]], limit: int
) -> None:
    Job.objects.all().delete()
    Job.objects.bulk_create(Job(kind="k", queue=queue, fair_key=key, state=state) for queue, key, state in rows)

    expected: set[str] = set()
    for state in ("available", "running"):
        pairs = sorted({(queue, key) for queue, key, row_state in rows if row_state == state})
        expected |= {key for _, key in pairs[:limit]}
    assert keys_with_jobs(limit) == expected


def test_find_job_keys__reads_the_key_indexes_never_the_table() -> None:
    """Sequential scans priced out: a statement that an index cannot answer still plans a Seq Scan."""
    Job.objects.enqueue_many({"kind": "k", "queue": f"q{n % 3}", "fair_key": f"t{n % 7}"} for n in range(50))
    with transaction.atomic(), connection.cursor() as cursor:
        # The plan is read on statistics of these rows, not on what an earlier test left behind
        # (a test of 100,000 parked jobs once made it a bitmap scan and a sort).
        cursor.execute("ANALYZE awa_job")
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + statements["find_job_keys"], {"limit": 100})
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "Seq Scan" not in plan and "Sort" not in plan, plan
    assert "awa_job_key_available_idx" in plan and "awa_job_key_running_idx" in plan, plan


def test_queue_list__links_each_queue_to_its_live_fair_keys(admin_client: Client) -> None:
    QueueFactory(name="exports")
    QueueFactory(name="reports")

    page = admin_client.get("/admin/awa/queue/").content.decode()

    assert '<th scope="col" class="column-fair_keys">' in page
    for name in ("exports", "reports"):
        assert f'href="/admin/awa/queue/keys/{name}/" class="awa-keys-link"' in row_of(page, name)


def test_queue_list__paused_is_a_badge_where_paused_and_no_red_icon_where_not(admin_client: Client) -> None:
    QueueFactory(name="running")
    QueueFactory(name="stopped", paused=True)

    page = admin_client.get("/admin/awa/queue/").content.decode()

    running, stopped = row_of(page, "running"), row_of(page, "stopped")
    cell = re.search(r'<td class="field-paused_badge">(.*?)</td>', running, re.S)
    assert cell is not None and cell.group(1) == "-"  # the admin's empty value: nothing to flag
    assert "icon-no" not in running and "icon-yes" not in running
    assert '<td class="field-paused_badge"><span class="awa-badge awa-badge-paused">paused</span></td>' in stopped
