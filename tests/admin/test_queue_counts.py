"""The queues' job counts (``services.stats.job_counts``, ``count_queue_jobs.sql``): exactly what a
Python count of the rows gives, for every queue and counted state, with the oldest available
run_at; with a bound, each (queue, state) count stops past it and reads "more than the bound";
the dashboard and the queue list print such a count as ``N+``; and the statement reads only the
counted states' partial indexes (never awa_job whole, never the completed and cancelled rows).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.admin import dashboard, queues
from awa_django.defaults import PRIORITY_MAX, PRIORITY_MIN
from awa_django.models import Job, Queue
from awa_django.services.stats import COUNTED_STATES, job_counts, queue_stats
from awa_django.sql import statements
from awa_django.states import JobState
from tests.harness import fresh_job_table

STATES = [state.value for state in JobState]
QUEUES = ["a", "b", "c", "d"]

ROWS = st.lists(
    st.tuples(
        st.sampled_from(QUEUES),
        st.sampled_from(STATES),
        st.integers(PRIORITY_MIN, PRIORITY_MAX),
        st.integers(-600, 600),  # run_at, seconds from now
    ),
    max_size=40,
)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=ROWS,
    limit=st.none() | st.integers(0, 6),
    asked=st.none() | st.lists(st.sampled_from([*QUEUES, "nowhere"]), unique=True, max_size=3),
)
def test_job_counts__match_a_python_count_of_the_rows(
    rows: list[tuple[str, str, int, int]], limit: int | None, asked: list[str] | None
) -> None:
    Job.objects.all().delete()
    now = timezone.now().replace(microsecond=0)
    Job.objects.bulk_create(
        Job(kind="k", queue=queue, state=state, priority=priority, run_at=now + timedelta(seconds=offset))
        for queue, state, priority, offset in rows
    )
    expected: dict[str, tuple[dict[str, int], Any]] = {}
    for queue in QUEUES if asked is None else asked:
        mine = [row for row in rows if row[0] == queue]
        counts = {}
        for state in COUNTED_STATES:
            n = sum(1 for row in mine if row[1] == state)
            if n:
                counts[str(state)] = n if limit is None else min(n, limit + 1)
        available = [now + timedelta(seconds=row[3]) for row in mine if row[1] == JobState.AVAILABLE]
        if counts:
            expected[queue] = (counts, min(available) if available else None)
    assert job_counts(asked, limit) == expected


@pytest.mark.django_db
def test_job_counts__no_queues_asked_reads_nothing() -> None:
    Job.objects.create(kind="k", queue="a")
    assert job_counts([]) == {}


@pytest.mark.django_db
def test_queue_stats__a_count_past_the_bound_is_shown_as_more_than_it() -> None:
    Job.objects.bulk_create(Job(kind="k", queue="a") for _ in range(4))
    Job.objects.bulk_create(Job(kind="k", queue="a", state=JobState.FAILED) for _ in range(3))
    stats = queue_stats(None, workers=[], limit=3)["a"]
    assert (stats.capped(JobState.AVAILABLE), stats.shown(JobState.AVAILABLE)) == (True, "3+")
    assert (stats.capped(JobState.FAILED), stats.shown(JobState.FAILED)) == (False, "3")
    listed = stats.as_dict()
    assert listed["counts"][JobState.AVAILABLE] == 3 and listed["counts_capped"] == [JobState.AVAILABLE]
    exact = queue_stats(None, workers=[])["a"]
    assert (exact.available, exact.shown(JobState.AVAILABLE), exact.as_dict()["counts_capped"]) == (4, "4", [])


@pytest.mark.django_db
def test_console__dashboard_and_queue_list_print_a_capped_count_with_a_plus(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard, "COUNT_LIMIT", 2)
    monkeypatch.setattr(queues, "COUNT_LIMIT", 2)
    Queue.objects.create(name="a")
    Job.objects.bulk_create(Job(kind="k", queue="a") for _ in range(5))
    Job.objects.create(kind="k", queue="a", state=JobState.FAILED)
    board = admin_client.get(reverse("admin:awa_dashboard")).content.decode()
    assert '<td class="num" data-count="available">2+</td>' in board, board
    listed = admin_client.get(reverse("admin:awa_queue_changelist")).content.decode()
    assert 'class="field-available">2+<' in listed and 'class="field-failed">1<' in listed
    data = admin_client.get(reverse("admin:awa_dashboard_data")).json()
    (row,) = [q for q in data["queues"] if q["name"] == "a"]
    assert (row["counts"]["available"], row["counts_capped"], row["count_limit"]) == (2, ["available"], 2)


@pytest.mark.django_db
@pytest.mark.parametrize("limit", [None, 10_001])
def test_job_counts__read_only_the_counted_states_partial_indexes(limit: int | None) -> None:
    """Sequential scans priced out (``enable_seqscan = off``): a count that no partial index of the
    counted states can answer would still be planned as a (disabled) Seq Scan, or through an index
    over other states. Which of those indexes the planner picks on a table this small (a bitmap,
    the run_at index for the pending states) differs from a big one, where each count is an
    index-only scan of its state's index with the queue first: bench/console_pages.py prints that
    plan on 10,000,000 rows."""
    fresh_job_table()
    Job.objects.bulk_create(
        Job(kind="k", queue=f"q{n % 3}", state=STATES[n % len(STATES)], priority=1 + n % 4) for n in range(3000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job, awa_job_done")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        params = {"queues": None, "lim": limit, "pmin": PRIORITY_MIN, "pmax": PRIORITY_MAX}
        cursor.execute("EXPLAIN " + statements["count_queue_jobs"], params)
        shown = "\n".join(row[0] for row in cursor.fetchall())
    assert "Seq Scan" not in shown, shown
    used = set(re.findall(r"(?:using|Bitmap Index Scan on) (\w+)", shown))
    # Failed jobs: each partition of awa_job_done's failed branch by its partial index of failed
    # jobs (queue) (migration 0026), and the failed jobs left hot (a unique job keeping its key) by
    # awa_job_finalized_idx.
    history = {name for name in used if re.fullmatch(r"awa_job_done_f\w*_queue_idx", name)}
    assert history, shown
    assert used - history <= {
        "awa_job_available_idx",
        "awa_job_key_available_idx",
        "awa_job_pending_queue_idx",
        "awa_job_pending_run_at_idx",
        "awa_job_key_running_idx",
        "awa_job_running_hb_idx",
        "awa_job_finalized_idx",
    }, shown
