"""The console's search among finished jobs can use its GIN indexes: the queries the Job list runs
for ``state=failed`` plus an args path, an args object or a tag are planned on awa_job_done's
args and tags GIN indexes, in each failed partition (with sequential scans priced out, so the
test does not depend on table size),
and the same search with no state filter still finds unfinished jobs (through their own indexes)."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction
from django.db.models import QuerySet
from django.test import Client

from awa_django.admin.search import search_jobs
from awa_django.models import Job
from tests.factories import JobFactory


def plan_of(queryset: QuerySet[Job]) -> str:
    """The plan, on 3,000 failed jobs of distinct args and tags, analysed: the finished-jobs btree
    then selects every row, and the GIN index is the cheap way to the few that match."""
    Job.objects.bulk_create(
        Job(kind="k", state="failed", args={"user_id": n, "order": {"id": n}}, tags=[f"t{n}"]) for n in range(3000)
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job, awa_job_done")
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = queryset.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("term", "index"),
    [
        ("user_id=42", "args_idx"),
        ('{"order": {"id": 7}}', "args_idx"),
        ("tag:urgent", "tags_idx"),
    ],
)
def test_search__failed_jobs_by_args_or_tag__planned_on_the_gin_index(term: str, index: str) -> None:
    queryset = search_jobs(Job.objects.filter(state="failed"), term)
    plan = plan_of(queryset)
    assert re.search(rf"Index Scan on awa_job_done_f\w*_{index}\b", plan), plan
    assert "awa_job_done_c" not in plan, plan  # the completed branch is pruned


@pytest.mark.django_db
def test_search__without_a_state_filter__still_finds_unfinished_jobs() -> None:
    waiting = JobFactory(args={"user_id": 42}, tags=["urgent"])
    done = JobFactory(args={"user_id": 42}, tags=["urgent"], state="failed")
    JobFactory(args={"user_id": 43}, state="failed")
    assert set(search_jobs(Job.objects.all(), "user_id=42")) == {waiting, done}
    assert set(search_jobs(Job.objects.all(), "tag:urgent")) == {waiting, done}
    assert set(search_jobs(Job.objects.filter(state="failed"), "user_id=42")) == {done}


@pytest.mark.django_db
def test_search__the_job_list_page_with_a_failed_filter_and_args(admin_client: Client) -> None:
    done = JobFactory(args={"user_id": 42}, state="failed")
    page = admin_client.get("/admin/awa/job/", {"state__exact": "failed", "q": "user_id=42"})
    assert page.status_code == 200
    assert [j.pk for j in page.context["cl"].result_list] == [done.pk]
