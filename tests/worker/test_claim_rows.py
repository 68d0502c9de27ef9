"""The claim's row factories decode a row by column name, whatever order the statement returns its
columns in, and refuse a statement that lacks one, naming it (real Postgres results)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from awa_django.context import ClaimedJob, ClaimRows, claimed_job_row, column_names

RUN_AT = datetime(2026, 12, 4, 8, 0, tzinfo=timezone.utc)
# Each ClaimedJob field as a SQL expression and the value it decodes to.
COLUMNS: dict[str, tuple[str, Any]] = {
    "id": ("41::bigint", 41),
    "kind": ("'send'::varchar", "send"),
    "queue": ("'mail'::varchar", "mail"),
    "args": ("""'{"to": "a@b.c"}'::jsonb""", {"to": "a@b.c"}),
    "attempt": ("2::smallint", 2),
    "max_attempts": ("25::smallint", 25),
    "run_lease": ("7::bigint", 7),
    "priority": ("3::smallint", 3),
    "metadata": ("""'{"m": 1}'::jsonb""", {"m": 1}),
    "run_at": ("'2026-12-04 08:00:00+00'::timestamptz", RUN_AT),
    "waited": ("0.25::float8", 0.25),
    "timeout": ("NULL::float8", None),
    "fair_key": ("'tenant:1'::varchar", "tenant:1"),
    "workflow_id": ("9::bigint", 9),
}
EXPECTED = ClaimedJob(**{name: value for name, (_, value) in COLUMNS.items()})


def select(names: list[str], more: bool | None = None) -> str:
    columns = [f"{COLUMNS[name][0]} AS {name}" for name in names]
    if more is not None:
        columns.append(f"{str(more).lower()} AS more")
    return "SELECT " + ", ".join(columns)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(COLUMNS)), more=st.booleans(), extra=st.booleans())
def test_rows_decode_by_name_whatever_the_column_order(
    other_connection: psycopg.Connection[Any], order: list[str], more: bool, extra: bool
) -> None:
    sql = select(order, more)
    if extra:  # a column the job does not carry is passed over
        sql += ", 'x' AS unrelated"
    assert other_connection.cursor(row_factory=claimed_job_row).execute(sql).fetchall() == [EXPECTED]
    rows = ClaimRows()
    assert other_connection.cursor(row_factory=rows).execute(sql).fetchall() == [EXPECTED]
    assert rows.more is more


def test_names_come_from_the_result(other_connection: psycopg.Connection[Any]) -> None:
    cursor = other_connection.execute(select(["kind", "id"], more=True))
    assert column_names(cursor) == ["kind", "id", "more"]
    assert column_names(other_connection.cursor()) == []  # no result yet


@pytest.mark.parametrize("left_out", ["fair_key", "run_lease"])
def test_a_statement_without_a_field_is_refused_naming_it(
    other_connection: psycopg.Connection[Any], left_out: str
) -> None:
    sql = select([name for name in COLUMNS if name != left_out])
    for factory in (claimed_job_row, ClaimRows()):
        with pytest.raises(LookupError, match=f"the claim statement returns no column {left_out} for ClaimedJob"):
            other_connection.cursor(row_factory=factory).execute(sql).fetchall()


def test_a_claim_without_more__more_stays_unknown(other_connection: psycopg.Connection[Any]) -> None:
    rows = ClaimRows()
    assert other_connection.cursor(row_factory=rows).execute(select(list(COLUMNS))).fetchall() == [EXPECTED]
    assert rows.more is None
