"""The console search asked as one arm per group of states (admin/search.py): the jobs it finds are
exactly those a plain Python filter finds, in every state, with or without the state filter; every
arm of every indexed shape has a partial index to answer it, so no search reads awa_job whole; and
a counted job list fetches its page sorted, a capped one in the primary key's order.

The plan test prices sequential scans out (``enable_seqscan = off``): where some arm has no index
Postgres still plans a Seq Scan (marked disabled), so the assertion fails exactly when an arm is not
covered by a partial index. That the planner also prefers those indexes on a 10,000,000-row table
is shown by ``bench/console_pages.py`` (its EXPLAIN of each search), not asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import QuerySet
from django.test import Client
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.admin.helpers import COUNT_LIMIT
from awa_django.admin.search import STATE_GROUPS, search_jobs
from awa_django.models import Job
from awa_django.states import TERMINAL_STATES, JobState
from tests.harness import fresh_job_table

JOB_TABLE = f'"{Job._meta.db_table}"'  # the quoted table (or view) the model reads
LISTED = f'SELECT {JOB_TABLE}."id", {JOB_TABLE}."kind"'  # the list's page query begins so

STATES = [state.value for state in JobState]
TAGS = ["red", "blue", "green"]
WORDS = ["gateway", "timeout", "template", "Card"]  # no search word is in the entries' keys ("error", "attempt")


def test_search__state_groups_cover_every_state_once() -> None:
    grouped = [state for group in STATE_GROUPS for state in group]
    assert sorted(grouped) == sorted(JobState)


ROWS = st.lists(
    st.tuples(
        st.sampled_from(STATES),
        st.integers(0, 3),
        st.lists(st.sampled_from(TAGS), unique=True, max_size=2),
        st.lists(st.sampled_from(WORDS), max_size=2),
    ),
    min_size=1,
    max_size=25,
)
TERMS = st.one_of(
    st.integers(0, 3).map(lambda n: ("user_id", n)),
    st.integers(0, 3).map(lambda n: ("order", n)),
    st.sampled_from(TAGS).map(lambda t: ("tag", t)),
    st.sampled_from([*WORDS, "PLATE", "way"]).map(lambda w: ("error", w)),
)


def spelled(terms: list[tuple[str, Any]]) -> str:
    if len(terms) == 1 and terms[0][0] == "order":
        return f'{{"order": {{"id": {terms[0][1]}}}}}'  # the JSON-object shape (one term only)
    words = {"user_id": "user_id={}", "order": "order.id={}", "tag": "tag:{}", "error": "error:{}"}
    return " ".join(words[shape].format(value) for shape, value in terms)


def matches(job: Job, shape: str, value: Any) -> bool:
    if shape == "user_id":
        return bool(job.args["user_id"] == value)
    if shape == "order":
        return bool(job.args["order"]["id"] == value)
    if shape == "tag":
        return value in job.tags
    return any(str(value).upper() in entry["error"].upper() for entry in job.errors)


@pytest.mark.django_db
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=ROWS,
    terms=st.lists(TERMS, min_size=1, max_size=2),
    state=st.none() | st.sampled_from(STATES),
)
def test_search__by_state_arms_finds_what_a_python_filter_finds(
    rows: list[tuple[str, int, list[str], list[str]]], terms: list[tuple[str, Any]], state: str | None
) -> None:
    Job.objects.all().delete()
    made = Job.objects.bulk_create(
        Job(
            kind="k",
            state=row_state,
            args={"user_id": user, "order": {"id": (user + n) % 4}},
            tags=tags,
            errors=[{"error": " ".join(words), "attempt": 1}] if words else [],
        )
        for n, (row_state, user, tags, words) in enumerate(rows)
    )
    queryset: QuerySet[Job] = Job.objects.all() if state is None else Job.objects.filter(state=state)
    found = set(search_jobs(queryset, spelled(terms), None if state is None else [state]).values_list("pk", flat=True))
    expected = {
        job.pk
        for job in made
        if (state is None or job.state == state) and all(matches(job, shape, value) for shape, value in terms)
    }
    assert found == expected


@pytest.mark.django_db
def test_search__states_outside_the_filter_find_nothing() -> None:
    Job.objects.create(kind="k", state="failed", args={"user_id": 1})
    assert not search_jobs(Job.objects.all(), "user_id=1", ["no-such-state"]).exists()


def plan(queryset: QuerySet[Job]) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = queryset.query.sql_with_params()
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def copies(template: Job, count: int, errors_sql: str) -> None:
    """``count`` more rows like ``template``, written by the server in one statement (a Python
    bulk_create of 20,000 rows took 15 s of a loaded run), each with the errors ``errors_sql`` (an
    SQL expression of ``n``, 1..count) gives it."""
    columns = [f.column for f in Job._meta.concrete_fields if f.column not in ("id", "errors")]
    names = ", ".join(f'"{c}"' for c in columns)
    table = "awa_job_done" if template.state in TERMINAL_STATES else "awa_job"  # where its state lives (0023)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (id, {names}, errors) "  # awa_job_done's id has no default: the hot table's sequence
            f"SELECT nextval(pg_get_serial_sequence('awa_job', 'id')), {names}, {errors_sql} "
            f"FROM {table} AS job, generate_series(1, %s) AS n WHERE job.id = %s",
            [count, template.pk],
        )


# Each job's one error entry, "KeyError: 'template N'" for N = n mod 500.
TEMPLATE_ERRORS = (
    "jsonb_build_array(jsonb_build_object('error', 'KeyError: ''template ' || (n %% 500) || '''', 'attempt', 1))"
)


@pytest.fixture
def every_state() -> None:
    fresh_job_table()
    Job.objects.bulk_create(
        Job(
            kind="k",
            state=STATES[n % len(STATES)],
            args={"user_id": n, "order": {"id": n}},
            tags=[f"t{n % 50}"],
            errors=[{"error": f"KeyError: 'template {n % 20}'", "attempt": 1}] if n % 3 == 0 else [],
        )
        for n in range(4000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job, awa_job_done")


@pytest.mark.django_db
def test_search__every_arm_is_answered_by_a_partial_index(every_state: None) -> None:
    """Each term shape, with no state filter and with each state's: the 4,000 rows are written and
    analysed once (they were once per combination: 36 times), and every combination is planned on
    them; a failure names each combination that reads awa_job whole, with its plan."""
    seq_scans = {}
    for term in ["user_id=42", '{"order": {"id": 7}}', "tag:t7", "tag:t7 user_id=7"]:
        for state in [None, *STATES]:
            queryset = Job.objects.all() if state is None else Job.objects.filter(state=state)
            shown = plan(search_jobs(queryset.only("id"), term, None if state is None else [state]))
            if "Seq Scan" in shown:
                seq_scans[(term, state)] = shown
    assert seq_scans == {}


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["failed", "retryable"])
def test_search__error_text_of_failed_and_retryable_jobs_is_answered_by_the_trigram_index(state: str) -> None:
    """On 20,000 such jobs, analysed: the text matches 1 in 500 of them, and the trigram index is the
    cheap way to those (reading every failed job through its finalized_at index is the other). A
    failed job's is awa_job_done_error_text_idx (migration 0023, on each failed partition), a
    retryable one's awa_job_error_text_idx (0021, the hot table)."""
    index = "awa_job_done_error_text_idx" if state == "failed" else "awa_job_error_text_idx"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        available = cursor.fetchone() is not None
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [index])
        built = cursor.fetchone()[0]
    assert built == available  # the migrations build it wherever the extension is available
    if not available:
        pytest.skip("pg_trgm is not available on this server: the migrations skipped the index")
    with connection.cursor() as cursor:  # the index and, on a partitioned table, its partitions' own
        cursor.execute("SELECT relid::regclass::text FROM pg_partition_tree(%s::regclass)", [index])
        names = {name for (name,) in cursor.fetchall()} | {index}
    fresh_job_table()
    template = Job.objects.create(kind="k", state=state, errors=[{"error": "KeyError: 'template 0'", "attempt": 1}])
    copies(template, 19_999, TEMPLATE_ERRORS)
    assert Job.objects.filter(state=state).count() == 20_000
    assert Job.objects.filter(errors__0__error="KeyError: 'template 123'").count() == 40
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa_job, awa_job_done")
    shown = plan(search_jobs(Job.objects.filter(state=state).only("id"), "error:template 123", [state]))
    assert any(f" {name} " in shown or shown.endswith(f" {name}") for name in names), shown
    assert "Seq Scan on awa_job_done" not in shown and "Seq Scan on awa_job " not in shown, shown


@pytest.mark.django_db
def test_search__the_list_page_with_a_state_filter_finds_that_state_only(admin_client: Client) -> None:
    failed = Job.objects.create(kind="k", state="failed", args={"user_id": 5}, tags=["x"])
    Job.objects.create(kind="k", state="available", args={"user_id": 5}, tags=["x"])
    page = admin_client.get("/admin/awa/job/", {"state__exact": "failed", "q": "tag:x user_id=5"})
    assert [job.pk for job in page.context["cl"].result_list] == [failed.pk]
    everywhere = admin_client.get("/admin/awa/job/", {"q": "tag:x user_id=5"})
    assert len(everywhere.context["cl"].result_list) == 2


@pytest.mark.django_db
@pytest.mark.parametrize("page", [1, 2, 3])
def test_list_page__a_counted_filter_reads_its_page_by_the_ids_it_counted(admin_client: Client, page: int) -> None:
    """A filter counted under the bound read its matches' ids: the page is read by those ids (with
    the filter asked again of those rows), not by running the search over the table a second time;
    the rows are the page's, in id order."""
    Job.objects.bulk_create(Job(kind="k", state=STATES[n % len(STATES)], args={"user_id": n % 2}) for n in range(230))
    expected = sorted(Job.objects.filter(args__user_id=1).values_list("pk", flat=True), reverse=True)
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/admin/awa/job/", {"q": "user_id=1", "p": str(page)})
    assert [job.pk for job in response.context["cl"].result_list] == expected[(page - 1) * 50 : page * 50]
    listed = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(LISTED)]
    assert len(listed) == 1 and f'{JOB_TABLE}."id" IN (' in listed[0], listed


@pytest.mark.django_db
def test_list_page__a_capped_filter_keeps_the_plain_id_order(admin_client: Client) -> None:
    copies(Job.objects.create(kind="k", state="failed"), COUNT_LIMIT, "job.errors")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get("/admin/awa/job/", {"state__exact": "failed"})
    assert len(response.context["cl"].result_list) == 50
    listed = [q["sql"] for q in queries.captured_queries if q["sql"].startswith(LISTED)]
    assert len(listed) == 1 and f'ORDER BY {JOB_TABLE}."id" DESC' in listed[0], listed


@pytest.mark.django_db
@pytest.mark.parametrize("state", ["failed", "retryable", "completed"])
def test_search__error_text_is_the_messages_not_the_traceback_time_or_keys(state: str) -> None:
    """``error:`` reads each entry's message: a word only in a traceback, a timestamp or a key of
    the entries finds nothing, in an indexed state or not."""
    entry = {"attempt": 1, "at": "2026-12-02T09:00:00+00:00", "exception": "app.Boom"}
    said = Job.objects.create(
        kind="k", state=state, errors=[{**entry, "error": "Boom: gateway", "traceback": "File x, in pay"}]
    )
    Job.objects.create(kind="k", state=state, errors=[{**entry, "error": "Boom: other", "traceback": "gateway"}])
    queryset = Job.objects.filter(state=state)
    assert list(search_jobs(queryset, "error:GATEWAY", [state])) == [said]
    for elsewhere in ("in pay", "2026-12-02", "traceback", "attempt", "app.Boom"):
        assert not search_jobs(queryset, f"error:{elsewhere}", [state]).exists(), elsewhere
