"""``awa_job_error_text_idx``: the console's ``error:TEXT`` search indexed on the error messages
alone (each entry's ``error``), replacing 0017's ``awa_job_errors_trgm_idx`` on the whole error
history's text. Built CONCURRENTLY before the old one is dropped (the migration is not atomic; an
interrupted build leaves an INVALID index: drop it with DROP INDEX CONCURRENTLY and migrate again).

Why: the whole history's text holds each entry's timestamp, attempt number and traceback (up to
20,000 characters an entry). Their trigrams made the old index large and its candidates loose: on
10,000,000 rows, ``error:template 7`` among 400,000 failed jobs got 106,000 candidates for 20,000
matches, each rechecked from the heap (360 ms to count 10,001 of them; 61 ms on this index,
bench/README.md). The search (admin/search.py) asks the same expression, so it finds the same jobs
in every state, through this index in the failed and retryable ones.

Only where the ``pg_trgm`` extension is available (0017 created it where it could); otherwise the
migration says so and the search reads the rows. Not in the model's Meta.indexes, since whether it
exists depends on the server.
"""

from __future__ import annotations

import sys
from typing import Any

from django.db import migrations

INDEX = "awa_job_error_text_idx"
OLD_INDEX = "awa_job_errors_trgm_idx"
# Exactly the expression admin/search.py's ErrorMessages renders, so the planner matches it.
CREATE_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INDEX} ON awa_job USING gin "
    "(upper((jsonb_path_query_array(errors, '$[*].error'::jsonpath))::text) gin_trgm_ops) "
    "WHERE state IN ('failed', 'retryable') AND errors IS NOT NULL"
)
CREATE_OLD_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {OLD_INDEX} ON awa_job "
    "USING gin (upper(errors::text) gin_trgm_ops) WHERE state IN ('failed', 'retryable') AND errors IS NOT NULL"
)


def _has_trgm(cursor: Any) -> bool:
    cursor.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'")
    return cursor.fetchone() is not None


def build(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        if not _has_trgm(cursor):
            sys.stderr.write(
                f"  awa: the pg_trgm extension is not installed in this database: {INDEX} is not built, and\n"
                "  the console's error:TEXT search reads the rows. Have a superuser run CREATE EXTENSION pg_trgm\n"
                "  here, then run this migration again (migrate awa 0020, then migrate).\n"
            )
            return
        cursor.execute(CREATE_INDEX)
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {OLD_INDEX}")


def unbuild(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        if _has_trgm(cursor):
            cursor.execute(CREATE_OLD_INDEX)
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("awa", "0020_pending_queue_index"),
    ]

    operations = [
        migrations.RunPython(build, unbuild, elidable=False),
    ]
