"""A capped filter whose matches are not among the newest ids is sorted, not walked down the id
index, when sorting its matches is cheap enough (BoundedCountPaginator._few_to_sort): up to
SORT_MAX matches read from the heap, or eight times as many read from index entries alone (a time
filter through migration 0026's (finalized_at) and (created_at) INCLUDE (id)). The rows the
plan expects are read from the plan, not from the table.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django.admin.paging import BoundedCountPaginator, _scan_rows, _sort_share
from awa_django.models import Job


def scan(kind: str, rows: float, *children: dict[str, Any]) -> dict[str, Any]:
    return {"Node Type": kind, "Plan Rows": rows, "Plans": list(children)}


def test_scan_rows__heap_and_index_only_rows_of_each_scan_once() -> None:
    plan = scan(
        "Limit",
        50,
        scan(
            "Gather Merge",
            900_000,
            scan(
                "Append",
                450_000,
                {**scan("Index Only Scan", 300_000), "Relation Name": "done_1"},
                {**scan("Index Only Scan", 100_000), "Relation Name": "done_2"},
                scan("Bitmap Heap Scan", 30_000, scan("Bitmap Index Scan", 31_000)),
                scan("Seq Scan", 20_000),
                scan("Index Scan", 7),
            ),
        ),
    )

    assert _scan_rows(plan) == (50_007, {"done_1": 300_000, "done_2": 100_000})


def explain(queryset: Any) -> dict[str, Any]:
    sql, params = queryset.order_by().values_list("id", flat=True).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan: Any = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def test_sort_share__index_only_rows_an_eighth_where_all_visible_whole_elsewhere() -> None:
    share = 1 / 8
    assert _sort_share(0, {"done": 800}, {"done": 1.0}, share) == 1 / 8
    assert _sort_share(0, {"done": 800}, {"done": 0.0}, share) == 1.0
    assert _sort_share(0, {"done": 800}, {}, share) == 1.0  # unknown: as the heap
    assert _sort_share(0, {"done": 800}, {"done": 0.5}, share) == (400 / 8 + 400) / 800
    assert _sort_share(200, {"done": 800}, {"done": 1.0}, share) == (200 + 100) / 1000
    assert _sort_share(0, {}, {}, share) == 1.0


@pytest.mark.django_db(transaction=True)
def test_few_to_sort__index_only_rows_of_pages_not_all_visible_count_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """An index-only scan reads the row from the heap where its page is not all-visible (a table
    filled since its last vacuum): those matches count whole, as a heap scan's. (On a table whose
    pages are all-visible they count an eighth: bench/console.py's one-hour filters, where
    relallvisible = relpages after the build's VACUUM; in the test database VACUUM sets no page
    all-visible here, so that side is the pure test above.)"""
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="k", state="completed", finalized_at=now - timedelta(seconds=n), created_at=now) for n in range(4_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job_done")  # statistics, but no vacuum: no page is all-visible
    queryset = Job.objects.filter(finalized_at__gte=now - timedelta(hours=2)).order_by("-id")
    paginator = BoundedCountPaginator(queryset, 50)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        plan = explain(queryset)
        assert sum(_scan_rows(plan)[1].values()) >= 3_000, plan
        monkeypatch.setattr(BoundedCountPaginator, "SORT_MAX", float(plan["Plan Rows"]) / 4)
        assert not paginator._few_to_sort(queryset)


@pytest.mark.django_db(transaction=True)
def test_sorted_page__the_plain_querys_rows_and_the_older_link_kept_when_a_row_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A capped filter whose matches are all old is paged by sorting its ids, then reading those
    rows: the same rows as the plain query's page, and a keyset page's "older" link says whether
    older matches exist by the ids read, even when a row left the filter between the two reads."""
    monkeypatch.setattr(BoundedCountPaginator, "awa_limit", 30)
    Job.objects.bulk_create(Job(kind="old", state="failed") for _ in range(120))
    Job.objects.bulk_create(Job(kind="new", state="failed") for _ in range(3_000))
    queryset = Job.objects.filter(kind="old").order_by("-id")
    plain = list(queryset.values_list("pk", flat=True))
    paginator = BoundedCountPaginator(queryset, 10)
    assert paginator.count == 31 and paginator.awa_capped
    assert [job.pk for job in paginator.page(2).object_list] == plain[10:20]

    keyset = BoundedCountPaginator(queryset, 10)
    # Above every job: the newest-ids window (about 2,200 ids here) misses the old matches, 3,000
    # newer jobs down, and the page is sorted.
    keyset.awa_before = Job.objects.order_by("-id").values_list("pk", flat=True)[0] + 1
    sorted_ids = BoundedCountPaginator._sorted_ids

    def then_one_leaves(self: Any, matches: Any, bottom: int, top: int) -> list[int]:
        ids = sorted_ids(matches, bottom, top)
        Job.objects.filter(pk=ids[0]).update(kind="left")  # between the ids' read and the rows'
        return ids

    monkeypatch.setattr(BoundedCountPaginator, "_sorted_ids", then_one_leaves)
    assert keyset.count == 31
    page = [job.pk for job in keyset.page(1).object_list]
    # The newest ten that still match (the read's one row more fills the page), and older ones exist.
    assert page == plain[1:11] and keyset.awa_has_older, page
