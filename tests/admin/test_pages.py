"""The admin pages on a large table: rendered in a bounded number of queries, never a full COUNT(*)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from awa_django.admin.helpers import COUNT_LIMIT
from awa_django.models import Job, Queue, WorkerInstance
from tests.admin.test_history import roll_up
from tests.factories import QueueFactory

JOB_TABLE = f'"{Job._meta.db_table}"'  # the quoted table (or view) the model reads

pytestmark = pytest.mark.django_db

JOBS = 100_000
QUEUES = ("emails", "reports", "default")


def shown(count: int) -> str:
    """A count as the console prints it: bounded at COUNT_LIMIT (the fixture's ids, and so its
    counts per state, depend on the id sequence: a queue may hold just over 10,000 of a state)."""
    return f"{COUNT_LIMIT}+" if count > COUNT_LIMIT else str(count)


@pytest.fixture
def many_jobs(db: None) -> dict[str, dict[str, int]]:
    """100,000 jobs over three queues, then states spread by SQL; returns the expected counts."""
    Job.objects.enqueue_many({"kind": f"kind-{i % 7}", "queue": QUEUES[i % 3], "args": {"n": i}} for i in range(JOBS))
    with connection.cursor() as cursor:
        # id % 10: 1-3 completed over the last hour, 4 failed, 5 running, 6 scheduled, 7 retryable.
        cursor.execute(
            """
            UPDATE awa_job SET
              state = CASE id % 10 WHEN 1 THEN 'completed' WHEN 2 THEN 'completed' WHEN 3 THEN 'completed'
                                   WHEN 4 THEN 'failed' WHEN 5 THEN 'running' WHEN 6 THEN 'scheduled'
                                   ELSE 'retryable' END,
              finalized_at = CASE WHEN id % 10 BETWEEN 1 AND 4 THEN now() - (id % 59) * interval '1 minute' END,
              heartbeat_at = CASE WHEN id % 10 = 5 THEN now() END,
              run_at = CASE WHEN id % 10 IN (6, 7) THEN now() + interval '1 hour' ELSE run_at END,
              attempt = CASE WHEN id % 10 = 4 THEN 25 ELSE attempt END,
              errors = CASE WHEN id % 10 = 4 THEN '[{"error": "boom", "attempt": 25}]'::jsonb ELSE errors END
            WHERE id % 10 BETWEEN 1 AND 7
            """
        )
        cursor.execute("ANALYZE awa_job")
    QueueFactory(name="emails", min_workers=2, weight=3)
    QueueFactory(name="reports", paused=True)
    now = timezone.now()
    WorkerInstance.objects.create(
        instance_id=uuid.uuid4(), hostname="box", pid=42, started_at=now - timedelta(minutes=5), last_seen_at=now,
        mode="weighted", global_max_workers=10,
        queues={
            "emails": {"mode": "weighted", "capacity": {"type": "Weighted", "min_workers": 2, "weight": 3,
                       "overflow_held": 4}, "in_flight": 6, "available": 1, "paused": False, "jobs_available": 5},
            "default": {"mode": "weighted", "capacity": {"type": "Weighted", "min_workers": 0, "weight": 1,
                        "overflow_held": 2}, "in_flight": 2, "available": 0, "paused": False, "jobs_available": 5},
        },
        flags={"listening": True, "leader": True, "stopping": False, "in_flight": 8, "sync_running": 0},
    )  # fmt: skip
    expected: dict[str, dict[str, int]] = {}
    for queue, state in Job.objects.values_list("queue", "state"):
        expected.setdefault(queue, {}).setdefault(state, 0)
        expected[queue][state] += 1
    return expected


@pytest.fixture
def client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


def full_counts(queries: list[dict[str, Any]]) -> list[str]:
    """Queries that COUNT awa_job without a bound (a WHERE or a LIMIT in a subquery)."""
    bad = []
    for query in queries:
        sql = query["sql"]
        if re.search(r"COUNT\(", sql, re.I) and JOB_TABLE in sql and not re.search(r"\bWHERE\b|\bLIMIT\b", sql):
            bad.append(sql)
    return bad


# The job list's queries, bounded whatever the table holds, plus the three of its query budget in a
# test's transaction (SAVEPOINT, set_config of statement_timeout, RELEASE; in autocommit only the
# set_config is a statement): admin/helpers.py query_budget. One of the eleven is the fair key filter's
# loose index scan of the keys with jobs (admin/filters.py keys_with_jobs).
LIST_QUERIES = 11 + 3


def get(client: Client, url: str, budget: int, assert_max: Any) -> Any:
    with assert_max(budget) as captured:
        response = client.get(url)
    assert response.status_code == 200, response.content[:500]
    assert full_counts(captured.captured_queries) == []
    return response


def cells(html: str, row_name: str) -> str:
    match = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*>{row_name}</a>(?:(?!</tr>).)*</tr>", html, re.S)
    assert match, f"no changelist row for {row_name}"
    return match.group(0)


def test_queue_changelist__counts_per_queue_in_bounded_queries(
    many_jobs: dict[str, dict[str, int]], client: Client, django_assert_max_num_queries: Any
) -> None:
    response = get(client, reverse("admin:awa_queue_changelist"), 8, django_assert_max_num_queries)
    html = response.content.decode()
    row = cells(html, "emails")
    for state in ("available", "scheduled", "running", "failed"):
        assert f'class="field-{state}">{shown(many_jobs["emails"][state])}<' in row, state
    assert 'class="field-mode">weighted<' in row
    assert 'class="field-in_flight">6<' in row
    assert 'class="field-overflow_held">4<' in row
    assert re.search(r'class="field-oldest_available">\d+(s|m \d+s)<', row)
    assert "no live worker" in cells(html, "reports")


def test_job_changelist__unfiltered_and_filtered_in_bounded_queries(
    many_jobs: dict[str, dict[str, int]], client: Client, django_assert_max_num_queries: Any
) -> None:
    base = reverse("admin:awa_job_changelist")
    last_id = Job.objects.order_by("-id").values_list("id", flat=True)[0]
    page = get(client, base, LIST_QUERIES, django_assert_max_num_queries)
    assert f">{last_id}</a>" in page.content.decode()  # newest first
    assert page.context["cl"].result_count > 10_000  # the estimate, not a count

    failed = get(client, f"{base}?state__exact=failed&queue=emails", LIST_QUERIES, django_assert_max_num_queries)
    states = {row.state for row in failed.context["cl"].result_list}
    queues = {row.queue for row in failed.context["cl"].result_list}
    assert (states, queues) == ({"failed"}, {"emails"})
    assert failed.context["cl"].result_count == many_jobs["emails"]["failed"]

    assert "(estimated)" in page.content.decode()
    assert (
        "more than 10000 jobs (not counted further)"
        in get(client, f"{base}?state__exact=completed", LIST_QUERIES, django_assert_max_num_queries).content.decode()
    )
    assert f"{many_jobs['emails']['failed']} jobs" in failed.content.decode()

    kind = get(client, f"{base}?kind=kind-3", LIST_QUERIES, django_assert_max_num_queries)
    assert {row.kind for row in kind.context["cl"].result_list} == {"kind-3"}

    found = get(client, f"{base}?q={last_id}", LIST_QUERIES, django_assert_max_num_queries)
    assert [row.pk for row in found.context["cl"].result_list] == [last_id]
    assert get(client, f"{base}?q={2**70}", LIST_QUERIES, django_assert_max_num_queries).context["cl"].result_count == 0
    by_kind = get(client, f"{base}?q=kind-5", LIST_QUERIES, django_assert_max_num_queries)
    assert {row.kind for row in by_kind.context["cl"].result_list} == {"kind-5"}


def test_job_changelist__does_not_load_the_json_columns(
    many_jobs: dict[str, dict[str, int]], client: Client, django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(11) as captured:
        client.get(reverse("admin:awa_job_changelist"))
    listing = [q["sql"] for q in captured.captured_queries if f'ORDER BY {JOB_TABLE}."id" DESC' in q["sql"]]
    assert listing, "the list query orders by -id"
    for column in ("args", "errors", "metadata", "result", "progress"):
        assert f'{JOB_TABLE}."{column}"' not in listing[0]


def test_dashboard__renders_in_bounded_queries(
    transactional_db: None, many_jobs: dict[str, dict[str, int]], client: Client, django_assert_max_num_queries: Any
) -> None:
    # The chart reads the rollup's rows: committed jobs (transactional_db), then a round of it.
    roll_up()
    page = get(client, reverse("admin:awa_dashboard"), 8, django_assert_max_num_queries)
    html = page.content.decode()
    assert html.count('<svg class="awa-chart') == 1 + len(QUEUES)  # the main chart and one per queue
    assert 'class="awa-bar awa-bar-completed"' in html
    assert "weighted: min 2, weight 3, overflow held 4" in html
    assert "box:42" in html

    data = get(client, reverse("admin:awa_dashboard_data"), 8, django_assert_max_num_queries).json()
    by_name = {q["name"]: q for q in data["queues"]}
    for queue in QUEUES:
        for state in ("available", "scheduled", "retryable", "running", "failed"):
            expected = many_jobs[queue].get(state, 0)
            assert by_name[queue]["counts"][state] == min(expected, COUNT_LIMIT)
            assert (state in by_name[queue]["counts_capped"]) == (expected > COUNT_LIMIT)
    total_completed = sum(c.get("completed", 0) for c in many_jobs.values())
    total_failed = sum(c.get("failed", 0) for c in many_jobs.values())
    assert data["last_hour"] == {"completed": total_completed, "failed": total_failed}
    assert data["workers"][0]["queues"]["emails"]["overflow_held"] == 4
    assert "<svg" in data["html"]


def test_links_to_the_dashboard__from_the_app_index_and_both_changelists(client: Client) -> None:
    dashboard = reverse("admin:awa_dashboard")
    for url in (reverse("admin:app_list", args=["awa"]), reverse("admin:awa_queue_changelist"),
                reverse("admin:awa_job_changelist")):  # fmt: skip
        assert f'href="{dashboard}"' in client.get(url).content.decode(), url


def test_job_detail__pretty_prints_data_and_error_history(client: Client) -> None:
    job = Job.objects.enqueue("render", {"user": 1, "tags": ["<b>x</b>"]}, metadata={"by": "me"})
    Job.objects.filter(pk=job.pk).update(
        state="failed",
        finalized_at=timezone.now(),
        progress={"done": 3},
        errors=[
            {"error": "ValueError: first", "attempt": 1, "at": "2024-01-01T00:00:00Z",
             "traceback": "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: first\n"},
            {"error": "ValueError: <second>", "attempt": 2, "at": "2024-01-01T00:01:00Z"},
        ],
    )  # fmt: skip
    html = client.get(reverse("admin:awa_job_change", args=[job.pk])).content.decode()
    assert '<pre class="awa-pre">{\n  &quot;tags&quot;: [\n    &quot;&lt;b&gt;x&lt;/b&gt;&quot;' in html
    assert "&quot;by&quot;: &quot;me&quot;" in html
    assert "&quot;done&quot;: 3" in html
    assert '<pre class="awa-pre awa-traceback">Traceback (most recent call last):' in html
    assert "ValueError: &lt;second&gt;" in html
    history = html[html.index('<ol class="awa-errors">') :]  # the error history, below the attempts table
    assert history.index("ValueError: &lt;second&gt;") < history.index("ValueError: first")  # latest first
    assert "Retry now" in html and "Cancel job" not in html


def test_job_detail__buttons_call_the_services(client: Client) -> None:
    job = Job.objects.enqueue("render")
    response = client.post(reverse("admin:awa_job_act", args=[job.pk, "cancel"]))
    assert response.status_code == 302
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    client.post(reverse("admin:awa_job_act", args=[job.pk, "retry"]))
    assert Job.objects.get(pk=job.pk).state == "available"
    assert client.get(reverse("admin:awa_job_act", args=[job.pk, "retry"])).status_code == 405


def test_job_delete_page__deletes_through_the_service(client: Client) -> None:
    job = Job.objects.enqueue("render")
    response = client.post(reverse("admin:awa_job_delete", args=[job.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()


def test_queue_actions__pause_and_resume_only_the_selected_rows(client: Client) -> None:
    emails, reports = QueueFactory(name="emails"), QueueFactory(name="reports")
    url = reverse("admin:awa_queue_changelist")
    client.post(url, {"action": "pause_selected", "_selected_action": [emails.pk]})
    assert dict(Queue.objects.values_list("name", "paused")) == {"emails": True, "reports": False}
    client.post(url, {"action": "resume_selected", "_selected_action": [emails.pk, reports.pk]})
    assert dict(Queue.objects.values_list("name", "paused")) == {"emails": False, "reports": False}


def test_queue_change_page__shows_the_rule_errors_and_saves_valid_edits(client: Client, settings: Any) -> None:
    settings.AWA = {"GLOBAL_MAX_WORKERS": 20}
    QueueFactory(name="reports", min_workers=15)
    queue = QueueFactory(name="emails")
    url = reverse("admin:awa_queue_change", args=[queue.pk])
    data = {"name": "emails", "max_workers": 5, "min_workers": 10, "weight": 0, "rate_burst": 0}
    html = client.post(url, data).content.decode()
    assert "weight 0 is invalid" in html
    data["weight"] = 2
    html = client.post(url, data).content.decode()
    assert "sum of min_workers (25) exceeds global_max_workers (20)" in html
    data["min_workers"] = 5
    assert client.post(url, data).status_code == 302
    queue.refresh_from_db()
    assert (queue.max_workers, queue.min_workers, queue.weight) == (5, 5, 2)
