"""The console search's indexes for the states 0015's finished-only GIN indexes leave out, built
CONCURRENTLY (the migration is not atomic; an interrupted build leaves an INVALID index: drop it
with DROP INDEX CONCURRENTLY and migrate again).

- ``awa_job_waiting_idx``: btree on the id of waiting jobs (workflow steps whose upstreams have
  not all ended). With the claim's, the promotion's and the rescue's partial indexes, every state
  before completion is now covered by a partial index, so the search asks one arm per state group
  (admin/search.py) and Postgres can answer a search over every state with a BitmapOr of partial
  indexes. That reads the unfinished rows and rechecks them, so it grows with the backlog, and on
  a long one the planner reads the table instead. A GIN on args and tags of queued jobs would not,
  but it takes two entries at every enqueue and every release (0.80-0.84x enqueue measured, and
  GIN's pending list is flushed by the inserting backend), and the hot path does not pay for a
  console search. One entry per waiting step.
- ``awa_job_failed_tags_idx``: GIN on the tags of failed jobs only, the state operators triage:
  a tag among failed jobs no longer reads every finished job carrying it. One entry per job that
  fails for good.
- ``awa_job_failed_queue_idx``: btree on (queue, run_at) of failed jobs, for the dashboard's and
  the queue list's failed count per queue (services/stats.job_counts): an index-only scan of the
  failed jobs instead of a read of the table. One entry per job that fails for good.
- ``awa_job_errors_trgm_idx``: a trigram GIN on the error history of failed and retryable jobs,
  for ``error:TEXT`` (an ILIKE).

Each predicate also says the indexed column IS NOT NULL (it is never null): a search's condition on
the column implies that (its operator is strict), while a query on the state alone (the dashboard's
counts, the failures page) does not, so the planner never reads one of these GIN indexes whole
only to narrow a scan to its states. Only where the ``pg_trgm`` extension is available and this role
  may create it; otherwise the migration says so and skips it, and that search reads the rows.
  Not in the model's Meta.indexes, since whether it exists depends on the server.
"""

from __future__ import annotations

import sys
from typing import Any

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import DatabaseError, migrations, models

TRGM_INDEX = "awa_job_errors_trgm_idx"
CREATE_TRGM_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TRGM_INDEX} ON awa_job "
    "USING gin (upper(errors::text) gin_trgm_ops) WHERE state IN ('failed', 'retryable') AND errors IS NOT NULL"
)


def add_errors_index(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_trgm'")
        if cursor.fetchone() is None:
            sys.stderr.write(
                f"  awa: the pg_trgm extension is not available on this server: {TRGM_INDEX} is not built, and\n"
                "  the console's error:TEXT search reads the rows. Install PostgreSQL's contrib package and\n"
                "  run this migration again (migrate awa 0016, then migrate) to build it.\n"
            )
            return
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        except DatabaseError as exc:
            sys.stderr.write(
                f"  awa: could not create the pg_trgm extension ({str(exc).strip()}): {TRGM_INDEX} is not\n"
                "  built, and the console's error:TEXT search reads the rows. Have a superuser run\n"
                "  CREATE EXTENSION pg_trgm in this database, then migrate awa 0016 and migrate again.\n"
            )
            return
        cursor.execute(CREATE_TRGM_INDEX)


def drop_errors_index(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {TRGM_INDEX}")


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("awa", "0016_workflows_more"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(fields=["id"], condition=models.Q(state="waiting"), name="awa_job_waiting_idx"),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=GinIndex(
                fields=["tags"], condition=models.Q(state="failed", tags__isnull=False), name="awa_job_failed_tags_idx"
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                fields=["queue", "run_at"], condition=models.Q(state="failed"), name="awa_job_failed_queue_idx"
            ),
        ),
        migrations.RunPython(add_errors_index, drop_errors_index, elidable=False),
    ]
