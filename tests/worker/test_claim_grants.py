"""The keyed claim's grants travel as one JSON text (``claim_grants``), each key's cursor run_at as
epoch seconds: the claim must start exactly after the cursor's job, whatever the microseconds, and
take the key's jobs in (priority, run_at, id) order up to its count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.sql import statements
from awa_django.worker.keyed import claim_grants

QUEUE = "claim-grants"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
KEY = 'tenant:"a"\\é😀'  # a key JSON must escape, with a character beyond the BMP

# run_at of past jobs: from before 1970 to now, to the microsecond, with near-equal neighbours
run_ats = st.one_of(
    st.integers(-(10**15), 0).map(lambda us: datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)),
    # from year 1, as enqueue takes (jobspec.RUN_AT_MIN): outside 1698-2242 a float is not exact
    st.integers(0, 10**15).map(lambda us: datetime(1, 1, 2, tzinfo=UTC) + timedelta(microseconds=us)),
    st.integers(0, 10**6).map(lambda us: NOW - timedelta(microseconds=us)),
)


def insert(key: str, jobs: list[tuple[int, datetime]]) -> list[tuple[int, datetime, int]]:
    rows = []
    with connection.cursor() as cursor:
        for priority, run_at in jobs:
            cursor.execute(
                "INSERT INTO awa_job (kind, queue, fair_key, args, state, priority, attempt, max_attempts, run_at,"
                " created_at, errors, metadata, tags, run_lease)"
                " VALUES ('noop', %s, %s, '{}', 'available', %s, 0, 25, %s, now(), '[]', '{}', '{}', 0)"
                " RETURNING priority, run_at, id",
                [QUEUE, key, priority, run_at],
            )
            rows.append(cursor.fetchone())
    return sorted(rows)


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    jobs=st.lists(st.tuples(st.integers(1, 3), run_ats), min_size=1, max_size=12),
    other=st.lists(st.tuples(st.integers(1, 3), run_ats), max_size=4),
    data=st.data(),
)
def test_claim_grants__the_claim_starts_exactly_after_each_cursor(
    jobs: list[tuple[int, datetime]], other: list[tuple[int, datetime]], data: st.DataObject
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM awa_job WHERE queue = %s", [QUEUE])
    ordered = insert(KEY, jobs)
    others = insert("b", other)
    at = data.draw(st.integers(-1, len(ordered) - 1), label="cursor")  # -1: no cursor, the key's front
    count = data.draw(st.integers(1, len(ordered) + 1), label="count")
    cursors = {} if at < 0 else {KEY: ordered[at]}
    counts = {KEY: count} | ({"b": len(others)} if others else {})
    params = {"queue": QUEUE, "grants": claim_grants(counts, cursors), "deadline": None, "worker": "test:1"}
    with connection.cursor() as cursor:
        cursor.execute(statements["claim_keyed_jobs"], params)
        columns = [column.name for column in cursor.description]
        claimed = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    mine = sorted((row["priority"], row["run_at"], row["id"]) for row in claimed if row["fair_key"] != "b")
    assert mine == ordered[at + 1 : at + 1 + count]
    assert sorted(row["id"] for row in claimed if row["fair_key"] == "b") == sorted(row[2] for row in others)
