"""The finished-only indexes of ``awa_job`` go (issue 43): since migration 0023 finished jobs live
in ``awa_job_done``, with their own search indexes, and nothing finished stays in ``awa_job`` but
unique jobs keeping their key and rows from before the upgrade (``awa_job_finalized_idx`` stays:
retention's sweep of those uses it).

Dropped CONCURRENTLY, so that workers keep claiming and finishing meanwhile: the migration is not
atomic. Interrupted, it leaves some indexes dropped and the others in place; run it again (each
drop says IF EXISTS). Unapplied, the indexes are built again, CONCURRENTLY.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# The finished-only indexes of awa_job: finished rows now live in awa_job_done, with their own.
# (awa_job_finalized_idx stays: the retention's sweep of the finished rows left hot uses it.)
OLD_INDEXES = {
    "awa_job_args_idx": "CREATE INDEX CONCURRENTLY IF NOT EXISTS awa_job_args_idx ON awa_job USING gin "
    "(args jsonb_path_ops) WHERE state IN ('completed', 'failed', 'cancelled')",
    "awa_job_tags_idx": "CREATE INDEX CONCURRENTLY IF NOT EXISTS awa_job_tags_idx ON awa_job USING gin (tags) "
    "WHERE state IN ('completed', 'failed', 'cancelled')",
    "awa_job_failed_tags_idx": "CREATE INDEX CONCURRENTLY IF NOT EXISTS awa_job_failed_tags_idx ON awa_job "
    "USING gin (tags) WHERE state = 'failed' AND tags IS NOT NULL",
    "awa_job_failed_queue_idx": "CREATE INDEX CONCURRENTLY IF NOT EXISTS awa_job_failed_queue_idx ON awa_job "
    "(queue, run_at) WHERE state = 'failed'",
}



def drop_old_indexes(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for name in OLD_INDEXES:
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def build_old_indexes(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for sql in OLD_INDEXES.values():
            cursor.execute(sql)


class Migration(migrations.Migration):
    # DROP INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [
        ("awa", "0023_history_partitions"),
    ]

    operations = [
        migrations.RunPython(drop_old_indexes, build_old_indexes),
    ]
