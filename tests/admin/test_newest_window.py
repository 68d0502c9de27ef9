"""A capped job list reads its page among the newest ids first (BoundedCountPaginator._newest_window),
and a search under the bound reads its page by the ids its count read: whatever the spread of the
matches (dense at the top, all old, a few), every page holds exactly the rows of the plain query's
page, and the planner settings the window changes for its one statement are back as they were
afterwards.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.admin import jobs
from awa_django.admin.paging import BoundedCountPaginator
from awa_django.models import Job

JOB_TABLE = f'"{Job._meta.db_table}"'  # the quoted table (or view) the model reads
LISTED = f'SELECT {JOB_TABLE}."id", {JOB_TABLE}."kind"'  # the list's page query begins so

# Each job: does it match the filter (args user_id=1)?  A run of booleans in id order, so the
# matches can be spread evenly, bunched among the oldest ids, or bunched among the newest.
SPREADS = st.lists(st.booleans(), min_size=1, max_size=120)


def page_ids(paginator: BoundedCountPaginator, number: int) -> list[int]:
    return [job.pk for job in paginator.page(number).object_list]


def scan_settings() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('enable_bitmapscan'), current_setting('enable_seqscan')")
        row = cursor.fetchone()
    return row[0], row[1]


@pytest.mark.django_db(transaction=True)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spread=SPREADS,
    limit=st.integers(1, 12),
    per_page=st.integers(1, 7),
    spare=st.integers(1, 3),
    widest=st.sampled_from([1, 10, 1_000]),
    data=st.data(),
)
def test_every_page_of_a_capped_filter_is_the_plain_querys_page(
    monkeypatch: pytest.MonkeyPatch,
    spread: list[bool],
    limit: int,
    per_page: int,
    spare: int,
    widest: int,
    data: st.DataObject,
) -> None:
    Job.objects.all().delete()
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", limit)
    monkeypatch.setattr(BoundedCountPaginator, "WINDOW_SPARE", spare)
    monkeypatch.setattr(BoundedCountPaginator, "WINDOW_MAX", widest)
    Job.objects.bulk_create(Job(kind="k", state="failed", args={"user_id": int(hit)}) for hit in spread)
    queryset = Job.objects.filter(args__user_id=1).order_by("-id")
    expected = list(queryset.values_list("pk", flat=True))
    paginator = BoundedCountPaginator(queryset, per_page)
    paginator.awa_read_ids = data.draw(st.booleans(), label="a search (reads its ids)")
    assert paginator.count == min(len(expected), limit + 1)
    assert paginator.awa_capped == (len(expected) > limit)
    number = data.draw(st.integers(1, paginator.num_pages), label="page")
    before = scan_settings()
    bottom = (number - 1) * per_page
    top = min(bottom + per_page, paginator.count)  # a capped list's last page ends at the bound
    assert page_ids(paginator, number) == expected[bottom:top]
    assert scan_settings() == before


@pytest.mark.django_db
def test_dense_matches_are_paged_in_one_windowed_statement(
    monkeypatch: pytest.MonkeyPatch, admin_client: Client
) -> None:
    """Half the jobs match: the window of the newest ids holds the page, so the list asks that one
    statement (``id >`` the window's floor) and never the plain query; the scan settings it turned
    off for that statement are on again in the (test's) outer transaction."""
    monkeypatch.setattr(jobs, "SEARCH_COUNT_LIMIT", 60)  # the bound of an args search's count
    Job.objects.bulk_create(Job(kind="k", state="failed", args={"user_id": n % 2}) for n in range(400))
    expected = list(Job.objects.filter(args__user_id=1).order_by("-id").values_list("pk", flat=True)[:50])
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/admin/awa/job/", {"q": "user_id=1", "state__exact": "failed"})
    assert "more than 60 jobs" in response.content.decode()
    assert [job.pk for job in response.context["cl"].result_list] == expected
    listed = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(LISTED)]
    assert len(listed) == 1 and f'{JOB_TABLE}."id" >' in listed[0], listed
    assert scan_settings() == ("on", "on")


@pytest.mark.django_db
def test_old_matches_fall_back_to_the_plain_query(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matches are all among the oldest ids: the window (about 500 of the 3,100 ids here) finds
    none, and the page comes from the plain query, complete."""
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 60)
    jobs: list[dict[str, Any]] = [{"user_id": 1}] * 100 + [{"user_id": 0}] * 3_000
    Job.objects.bulk_create(Job(kind="k", state="failed", args=args) for args in jobs)
    queryset = Job.objects.filter(args__user_id=1).order_by("-id")
    expected = list(queryset.values_list("pk", flat=True)[:5])
    paginator = BoundedCountPaginator(queryset, 5)
    assert paginator.count == 61 and paginator.awa_capped
    with CaptureQueriesContext(connection) as queries:
        assert page_ids(paginator, 1) == expected
    listed = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(LISTED)]
    assert len(listed) == 2 and f'{JOB_TABLE}."id" >' in listed[0] and f'{JOB_TABLE}."id" >' not in listed[1], listed


@pytest.mark.django_db
def test_a_search_and_the_kind_filter_count_to_the_search_bound_another_filter_and_an_id_to_the_list_bound(
    monkeypatch: pytest.MonkeyPatch, admin_client: Client
) -> None:
    """Any search term but an id (here a kind), and the kind filter (no index on kind either), count
    to SEARCH_COUNT_LIMIT; the same jobs picked by the state filter, and an id search, are counted
    to the list's bound (here they are all counted)."""
    monkeypatch.setattr(jobs, "SEARCH_COUNT_LIMIT", 60)
    Job.objects.bulk_create(Job(kind="report", state="failed") for _ in range(100))
    last = Job.objects.order_by("-id").first()
    assert last is not None
    for query in ({"q": "report"}, {"kind": "report"}):
        response = admin_client.get("/admin/awa/job/", query)
        assert "more than 60 jobs" in response.content.decode(), query
        assert response.context["cl"].paginator.awa_limit == 60
        assert {job.kind for job in response.context["cl"].result_list} == {"report"}
    filtered = admin_client.get("/admin/awa/job/", {"state__exact": "failed"})
    assert filtered.context["cl"].result_count == 100 and not filtered.context["cl"].paginator.awa_capped
    by_id = admin_client.get("/admin/awa/job/", {"q": f"#{last.pk}"})
    assert [job.pk for job in by_id.context["cl"].result_list] == [last.pk]
    assert by_id.context["cl"].paginator.awa_limit > 60
