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

from awa_django.admin.helpers import BoundedCountPaginator, _scan_rows
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
                scan("Index Only Scan", 400_000),
                scan("Bitmap Heap Scan", 30_000, scan("Bitmap Index Scan", 31_000)),
                scan("Seq Scan", 20_000),
                scan("Index Scan", 7),
            ),
        ),
    )

    assert _scan_rows(plan) == (50_007, 400_000)


def explain(queryset: Any) -> dict[str, Any]:
    sql, params = queryset.order_by().values_list("id", flat=True).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan: Any = cursor.fetchone()[0]
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


@pytest.mark.django_db(transaction=True)
def test_few_to_sort__a_time_filter_read_index_only_counts_an_eighth(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same expected matches: read index-only (the finished jobs' time index holds the id), the
    filter is sorted under a SORT_MAX an eighth of them would pass; read from the heap (those
    scans priced out), it is not."""
    now = timezone.now()
    Job.objects.bulk_create(
        Job(kind="k", state="completed", finalized_at=now - timedelta(seconds=n), created_at=now) for n in range(4_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE awa_job_done")  # the visibility map: index-only scans read no row
    queryset = Job.objects.filter(finalized_at__gte=now - timedelta(hours=2)).order_by("-id")
    paginator = BoundedCountPaginator(queryset, 50)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        plan = explain(queryset)
        heap, index_only = _scan_rows(plan)
        assert index_only >= 3_000 and heap < 100, (heap, index_only, plan)
        expected = float(plan["Plan Rows"])
        monkeypatch.setattr(BoundedCountPaginator, "SORT_MAX", expected / 4)
        assert paginator._few_to_sort(queryset)
        monkeypatch.setattr(BoundedCountPaginator, "SORT_MAX", expected / 16)
        assert not paginator._few_to_sort(queryset)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexonlyscan = off")
        cursor.execute("SET LOCAL enable_seqscan = off")
        heap, index_only = _scan_rows(explain(queryset))
        assert index_only == 0 and heap >= 3_000, (heap, index_only)
        monkeypatch.setattr(BoundedCountPaginator, "SORT_MAX", expected / 4)
        assert not paginator._few_to_sort(queryset)
